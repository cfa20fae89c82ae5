import type { Duration } from "effect"
import { Clock, Effect, Option } from "effect"
import type { Redis as IORedis } from "ioredis"
import * as B from "../domain/breaker.js"
import { StorageUnavailable } from "../schema/errors.js"
import { decodeState } from "./breakerScript.js"

/** The model of a provider credential's breaker (401/403): it covers every model of the provider. */
export const CREDENTIAL = "*"

export interface BreakerView {
  readonly provider: string
  readonly model: string
  readonly state: B.BreakerStateName
  readonly since: Date
  /** open: when it may half-open */
  readonly until: Date | null
  readonly trips: number
  readonly calls: number
  readonly faults: number
  /** redis: shared by all runners; local: this runner's, while Redis does not answer; credential: 401/403 */
  readonly source: "redis" | "local" | "credential"
}

interface Route {
  readonly provider: string
  readonly model: string
}

/**
 * What an operator sees of the breakers and the reset (force-close), over the state ProviderBreaker keeps: the
 * shared states in Redis, this runner's local ones and its credential breakers.
 */
export const makeBreakerAdmin = (deps: {
  readonly client: Option.Option<IORedis>
  readonly prefix: string
  readonly redisTimeout: Duration.Duration
  readonly local: Map<string, B.BreakerState>
  readonly credentials: Map<string, { readonly since: number; readonly until: number }>
  /** a reset route is closed now: its gauge, and its transition when it was not closed */
  readonly closed: (route: Route, from: B.BreakerStateName) => Effect.Effect<void>
}) => {
  const { client, credentials, local, prefix } = deps
  const s = { redisTimeout: deps.redisTimeout }
  const viewOf = (st: B.BreakerState, now: number, source: BreakerView["source"]): BreakerView => {
    const window = Object.values(st.b)
    return {
      provider: st.p,
      model: st.m,
      state: B.observed(st, now),
      since: new Date(st.since),
      until: st.s === "open" ? new Date(st.until) : null,
      trips: st.trips,
      calls: window.reduce((n, [c]) => n + c, 0),
      faults: window.reduce((n, [, f]) => n + f, 0),
      source
    }
  }

  /** Every shared state in Redis (None: Redis is not configured or did not answer). */
  const sharedStates = Effect.gen(function*() {
    if (Option.isNone(client)) return Option.none<ReadonlyArray<readonly [string, B.BreakerState]>>()
    const c = client.value
    return yield* Effect.tryPromise(async () => {
      const keys: Array<string> = []
      let cursor = "0"
      do {
        const [next, batch] = await c.scan(cursor, "MATCH", `${prefix}*`, "COUNT", 500)
        cursor = next
        keys.push(...batch)
      } while (cursor !== "0")
      const values = keys.length === 0 ? [] : await c.mget(...keys)
      return keys.flatMap((k, i) => {
        const st = decodeState(values[i])
        return Option.isSome(st) ? [[k, st.value] as const] : []
      })
    }).pipe(Effect.timeout(s.redisTimeout), Effect.option)
  })

  /** The breakers an operator sees: the shared ones, this runner's local ones while Redis fails, credentials. */
  const list = Effect.gen(function*() {
    const now = yield* Clock.currentTimeMillis
    const shared = yield* sharedStates
    const views = Option.match(shared, {
      onNone: () => [...local.values()].map((st) => viewOf(st, now, "local")),
      onSome: (states) => states.map(([, st]) => viewOf(st, now, "redis"))
    })
    for (const [provider, c] of credentials) {
      if (c.until > now) {
        views.push({
          provider,
          model: CREDENTIAL,
          state: "open",
          since: new Date(c.since),
          until: new Date(c.until),
          trips: 1,
          calls: 0,
          faults: 0,
          source: "credential"
        })
      }
    }
    views.sort((a, b) => a.provider.localeCompare(b.provider) || a.model.localeCompare(b.model))
    return { breakers: views, shared: Option.isSome(shared) || Option.isNone(client) }
  })

  /**
   * An operator's reset: the provider's breakers (or one model's; `*` its credential's) closed with an empty window,
   * in Redis and on this runner. Returns what was reset and from which state; fails if a configured Redis does not
   * answer (a reset that only this runner saw would mislead).
   */
  const unanswered = new StorageUnavailable({ message: "Redis did not answer: the shared breakers are unchanged" })
  const reset = (provider: string, model: Option.Option<string>) =>
    Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      const matches = (st: { p: string; m: string }) =>
        st.p === provider && Option.match(model, { onNone: () => true, onSome: (m) => m === st.m })
      const done = new Map<string, { provider: string; model: string; from: B.BreakerStateName }>()
      if (Option.isSome(client)) {
        const shared = yield* sharedStates
        if (Option.isNone(shared)) return yield* unanswered
        const keys = shared.value.filter(([, st]) => matches(st))
        if (keys.length > 0) {
          yield* Effect.tryPromise(() => client.value.del(...keys.map(([k]) => k))).pipe(
            Effect.timeout(s.redisTimeout),
            Effect.catchAll(() => unanswered)
          )
        }
        for (const [k, st] of keys) done.set(k, { provider: st.p, model: st.m, from: B.observed(st, now) })
      }
      for (const [k, st] of local) {
        if (!matches(st)) continue
        local.delete(k)
        if (!done.has(k)) done.set(k, { provider: st.p, model: st.m, from: B.observed(st, now) })
      }
      const credential = credentials.get(provider)
      if (credential !== undefined && Option.getOrElse(model, () => CREDENTIAL) === CREDENTIAL) {
        credentials.delete(provider)
        done.set(`credential:${provider}`, {
          provider,
          model: CREDENTIAL,
          from: credential.until > now ? "open" : "closed"
        })
      }
      for (const r of done.values()) yield* deps.closed(r, r.from)
      return [...done.values()]
    })

  return { list, reset } as const
}
