import { Clock, Duration, Effect, Either, Metric, Option } from "effect"
import * as B from "../domain/breaker.js"
import { breakerFallback, breakerRefused, breakerState, breakerTransitions } from "../observability/metrics.js"
import { seriesBy } from "../observability/series.js"
import { Redis } from "../redis/Redis.js"
import { makeSharedOrLocal } from "../redis/sharedOrLocal.js"
import { CREDENTIAL, makeBreakerAdmin } from "./breakerAdmin.js"
import { BREAKER_STEP, decodeState } from "./breakerScript.js"
import { BreakerSettings } from "./breakerSettings.js"

export interface Route {
  readonly provider: string
  readonly model: string
}
export type CallKind = "submit" | "query" | "cancel" | "lookup"

/** A guarded call's result: not sent (the breaker is open: look again in waitMs), or sent, with its outcome. */
export type Guarded<A, E> =
  | { readonly _tag: "Refused"; readonly waitMs: number }
  | { readonly _tag: "Sent"; readonly result: Either.Either<A, E> }

interface BreakerCommands {
  providerBreakerStep(
    ...args: ReadonlyArray<string | number>
  ): Promise<[number, number, string, string, string, string]>
}

type Op = "peek" | "admit" | "record"
interface Outcome {
  readonly admitted: boolean
  readonly probe: boolean
  readonly waitMs: number
  readonly state: B.BreakerState
  readonly from: B.BreakerStateName | null
}

const code = { closed: 0, half_open: 1, open: 2 } as const
// every step sets the route's state gauge (2–3 times per poll): series made once per route, not a Metric.tagged key each
const states = seriesBy(breakerState, "provider", "model")
const refusals = seriesBy(breakerRefused, "provider", "model", "call")
const transitions = seriesBy(breakerTransitions, "provider", "model", "to")

/**
 * Provider breakers (seed 19.6.3): one per provider and model, shared by every runner through Redis (one Lua step
 * per look or outcome, src/quota/breakerScript.ts); while Redis does not answer, each runner's local breaker of the
 * same rules decides. Also the provider credential's breaker: a 401/403 stops every call to that provider on this
 * runner for a while (a credential is fixed by a human, not by waiting out an error rate).
 */
export class ProviderBreaker extends Effect.Service<ProviderBreaker>()("ProviderBreaker", {
  effect: Effect.gen(function*() {
    const { client, keyPrefix } = yield* Redis
    const s = yield* BreakerSettings.config
    const config: B.BreakerConfig = {
      errorRate: s.errorRate,
      minCalls: s.minCalls,
      windowMs: Duration.toMillis(s.window),
      openForMs: Duration.toMillis(s.openFor),
      openMaxMs: Math.max(Duration.toMillis(s.openMax), Duration.toMillis(s.openFor)),
      probes: s.probes,
      probeTimeoutMs: Duration.toMillis(s.probeTimeout)
    }
    const redis = Option.map(client, (c) => {
      c.defineCommand("providerBreakerStep", { numberOfKeys: 1, lua: BREAKER_STEP })
      return c as unknown as BreakerCommands
    })
    const prefix = `${keyPrefix}breaker:`
    const keyOf = (r: Route) => `${prefix}${r.provider}/${r.model}`
    const local = new Map<string, B.BreakerState>()
    const credentials = new Map<string, { readonly since: number; readonly until: number }>()

    const sharedOrLocal = makeSharedOrLocal({
      client: redis,
      timeout: s.redisTimeout,
      degraded: "Redis unavailable: provider breakers fall back to this runner's own",
      recovered: "Redis answers again: provider breakers are shared again",
      onLocal: Metric.increment(breakerFallback)
    })
    /** The step on the state every runner shares: None (the caller goes local) without a readable answer. */
    const viaRedis = (route: Route, op: Op, now: number, fault: boolean, probe: boolean) => {
      const args = [op, now, config.errorRate, config.minCalls, config.windowMs, config.openForMs, config.openMaxMs]
      const more = [config.probes, config.probeTimeoutMs, route.provider, route.model, fault ? 1 : 0, probe ? 1 : 0]
      return sharedOrLocal(
        (c) => c.providerBreakerStep(keyOf(route), ...args, ...more, B.BUCKETS),
        ([admitted, isProbe, wait, , from, json]) =>
          Option.map(decodeState(json), (state): Outcome => ({
            admitted: admitted === 1,
            probe: isProbe === 1,
            waitMs: Number(wait),
            state,
            from: from === "" ? null : from as B.BreakerStateName
          }))
      )
    }

    const viaLocal = (route: Route, op: Op, now: number, fault: boolean, probe: boolean): Outcome => {
      const st = local.get(keyOf(route)) ?? B.closedState(route.provider, route.model, now)
      if (op === "record") {
        const step = B.record(st, now, config, fault, probe)
        local.set(keyOf(route), step.state)
        return { admitted: true, probe, waitMs: 0, state: step.state, from: step.from }
      }
      const step = B.admit(st, now, config, op === "admit")
      local.set(keyOf(route), step.state)
      const r = step.result
      return {
        admitted: r._tag === "Admitted",
        probe: r._tag === "Admitted" && r.probe,
        waitMs: r._tag === "Refused" ? r.waitMs : 0,
        state: step.state,
        from: step.from
      }
    }

    const transition = (route: Route, from: string, to: B.BreakerStateName, extra: Record<string, unknown>) =>
      Effect.gen(function*() {
        yield* Metric.increment(transitions(route.provider, route.model, to))
        const log = to === "open" ? Effect.logWarning : Effect.logInfo
        yield* log(`provider breaker ${from} → ${to}`).pipe(
          Effect.annotateLogs({
            provider: route.provider,
            model: route.model,
            breaker_from: from,
            breaker_to: to,
            ...extra
          })
        )
      })

    const gauge = (route: Route, state: B.BreakerStateName) =>
      Metric.set(states(route.provider, route.model), code[state])

    const step = (route: Route, op: Op, fault = false, probe = false) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const shared = yield* viaRedis(route, op, now, fault, probe)
        const out = Option.getOrElse(shared, () => viaLocal(route, op, now, fault, probe))
        yield* gauge(route, B.observed(out.state, now))
        if (out.from !== null) {
          yield* transition(route, out.from, out.state.s, {
            trips: out.state.trips,
            ...(out.state.s === "open" ? { open_until: new Date(out.state.until).toISOString() } : {}),
            shared: Option.isSome(shared)
          })
        }
        return out
      })

    const credentialWait = (provider: string, now: number) => Math.max(0, (credentials.get(provider)?.until ?? 0) - now)

    const refuse = (route: Route, call: CallKind, waitMs: number) =>
      Effect.as(Metric.increment(refusals(route.provider, route.model, call)), { _tag: "Refused", waitMs } as const)

    /**
     * May a `call` to `route` go now? `claim` false only looks, taking no half-open probe: a poll looks before it
     * takes a quota slot, so that an open breaker costs no slot. A refusal is counted and says how long to wait.
     */
    const admit = (route: Route, call: CallKind, claim = true): Effect.Effect<B.Admission> =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const credential = credentialWait(route.provider, now)
        if (credential > 0) return yield* refuse({ ...route, model: CREDENTIAL }, call, credential)
        const out = yield* step(route, claim ? "admit" : "peek")
        if (!out.admitted) return yield* refuse(route, call, out.waitMs)
        return { _tag: "Admitted", probe: out.probe } as const
      })

    /** The outcome of a call `admit` let through (`probe` as it said): `fault` for a 5xx, a timeout, no answer. */
    const record = (route: Route, probe: boolean, fault: boolean) => Effect.asVoid(step(route, "record", fault, probe))

    /**
     * Sends `effect` through the route's breaker: refused while it is open (nothing sent), else sent and its outcome
     * recorded. Never fails: the caller decides what a refusal means.
     */
    const guard = <A, E>(
      route: Route,
      call: CallKind,
      effect: Effect.Effect<A, E>,
      isFault: (e: E) => boolean
    ): Effect.Effect<Guarded<A, E>> =>
      Effect.gen(function*() {
        const admission = yield* admit(route, call)
        if (admission._tag === "Refused") return admission
        const result = yield* Effect.either(effect)
        yield* record(route, admission.probe, Either.isLeft(result) && isFault(result.left))
        return { _tag: "Sent", result } as const
      })

    /** A 401/403: the provider refused our credential; every call to it on this runner waits `ms`. */
    const tripCredential = (provider: string, ms: number) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        credentials.set(provider, { since: now, until: now + ms })
        yield* gauge({ provider, model: CREDENTIAL }, "open")
        yield* transition({ provider, model: CREDENTIAL }, "closed", "open", {
          open_until: new Date(now + ms).toISOString(),
          reason: "the provider refused our credential (401/403)"
        })
      })

    const { list, reset } = makeBreakerAdmin({
      client,
      prefix,
      redisTimeout: s.redisTimeout,
      local,
      credentials,
      closed: (r, from) =>
        Effect.zipRight(
          gauge(r, "closed"),
          from === "closed" ? Effect.void : transition(r, from, "closed", { reason: "operator reset" })
        )
    })

    return { admit, record, guard, tripCredential, list, reset } as const
  })
}) {}
