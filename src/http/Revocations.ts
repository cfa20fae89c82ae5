import { Duration, Effect, Metric } from "effect"
import { REVOCATIONS_CHANNEL } from "../persistence/channels.js"
import { type Revocation, TokenDenylist } from "../persistence/TokenDenylist.js"
import { runWakeLoop } from "../persistence/WakeLoop.js"
import { AuthSettings, type Credential } from "./Auth.js"

/** Who holds an open stream: its user and the access token it was opened with. */
export interface Holder {
  readonly userId: string
  readonly credential: Credential
}

export type StreamTransport = "sse" | "ws"

interface Hold {
  readonly holder: Holder
  readonly transport: StreamTransport
  readonly close: () => void
}

/**
 * A read looks back this far before the newest revocation it saw: `revoked_at` is a transaction's start, so a row can
 * commit after a later-started one was read. Applying an entry twice changes nothing.
 */
const LOOKBACK_MS = 60_000

export const tokenRevocations = Metric.counter("token_revocations_total", {
  description:
    "access tokens revoked on this runner, by kind (token: one id; user: all of a user's before a time) and via (ops, logout)"
})
export const streamsClosedByRevocation = Metric.counter("streams_closed_by_revocation_total", {
  description: "open SSE and WebSocket streams closed because their access token was revoked, by transport"
})
const denylistEntries = Metric.gauge("token_denylist_entries", {
  description: "revoked token ids and users this runner holds in memory (expired tokens' entries are dropped)"
})

/**
 * Every runner's view of the token denylist (PostgreSQL, TokenDenylist.ts), in memory so that a check costs a Map
 * lookup: a revocation written anywhere reaches it at once by NOTIFY `token_revocations`, and a read every
 * TOKEN_REVOCATION_REFRESH is the safety net (a lost NOTIFY, a lost LISTEN, the embedded database that has none):
 * the same wake loop as the inbox and the outbox (WakeLoop.ts). A revoked token is refused from then on, and the open
 * streams it holds are closed (their transports say how: SSE ends, WebSocket closes with 4401).
 */
export class Revocations extends Effect.Service<Revocations>()("Revocations", {
  scoped: Effect.gen(function*() {
    const denylist = yield* TokenDenylist
    const { revocationRefresh } = yield* AuthSettings.config
    /** revoked token ids → when the token expires anyway (ms; Infinity: not known) */
    const tokens = new Map<string, number>()
    /** user id → tokens issued before this instant (ms) are revoked */
    const users = new Map<string, number>()
    const byToken = new Map<string, Set<Hold>>()
    const byUser = new Map<string, Set<Hold>>()
    let newest: number | null = null

    const isRevoked = (h: Holder): boolean =>
      (h.credential.tokenId !== null && tokens.has(h.credential.tokenId)) ||
      h.credential.issuedAt * 1000 < (users.get(h.userId) ?? -Infinity)

    const closeAll = (holds: Iterable<Hold>, which: (h: Hold) => boolean): number => {
      let closed = 0
      for (const hold of [...holds]) {
        if (!which(hold)) continue
        closed++
        Metric.tagged(streamsClosedByRevocation, "transport", hold.transport).unsafeUpdate(1, [])
        hold.close()
      }
      return closed
    }

    /** Applies one entry; how many open streams it closed (null: known already). */
    const apply = (r: Revocation): number | null => {
      if (r.kind === "token") {
        if (tokens.has(r.tokenId)) return null
        tokens.set(r.tokenId, r.expiresAt?.getTime() ?? Infinity)
        return closeAll(byToken.get(r.tokenId) ?? [], () => true)
      }
      const cutoff = r.issuedBefore.getTime()
      if ((users.get(r.userId) ?? -Infinity) >= cutoff) return null
      users.set(r.userId, cutoff)
      return closeAll(byUser.get(r.userId) ?? [], (h) => h.holder.credential.issuedAt * 1000 < cutoff)
    }

    const applyLogged = (r: Revocation) =>
      Effect.suspend(() => {
        const closed = apply(r)
        if (closed === null) return Effect.void
        return Effect.logInfo(`token revocation applied: ${closed} open streams closed`).pipe(
          Effect.annotateLogs(
            r.kind === "token" ? { token_id: r.tokenId } : { user_id: r.userId, issued_before: r.issuedBefore }
          )
        )
      })

    /** Reads what is new in the denylist (with a look-back), applies it, and forgets expired tokens' entries. */
    const refresh = Effect.gen(function*() {
      const rows = yield* denylist.readSince(newest === null ? null : new Date(newest - LOOKBACK_MS))
      for (const r of rows) {
        yield* applyLogged(r)
        newest = Math.max(newest ?? 0, r.revokedAt.getTime())
      }
      const now = Date.now()
      for (const [id, expiresAt] of tokens) if (expiresAt < now - LOOKBACK_MS) tokens.delete(id)
      yield* Metric.set(denylistEntries, tokens.size + users.size)
      return 0
    })

    // the runner starts with the whole list (a failure here: the loop below keeps trying, and logs it)
    yield* Effect.ignore(refresh)
    yield* runWakeLoop({
      name: "token revocations",
      channel: REVOCATIONS_CHANNEL,
      sweep: revocationRefresh,
      batchSize: 1,
      backoff: { base: Duration.millis(200), cap: Duration.seconds(5) },
      drain: refresh
    }).pipe(Effect.forkScoped)

    const add = (map: Map<string, Set<Hold>>, key: string, hold: Hold) => {
      const set = map.get(key) ?? new Set()
      map.set(key, set.add(hold))
      return () => {
        set.delete(hold)
        if (set.size === 0 && map.get(key) === set) map.delete(key)
      }
    }

    /**
     * Registers an open stream; `close` is called (once) when its token is revoked, at once if it already is. Returns
     * what the transport calls when the stream ends for any reason.
     */
    const hold = (holder: Holder, transport: StreamTransport, close: () => void): () => void => {
      const entry: Hold = { holder, transport, close }
      if (isRevoked(holder)) {
        closeAll([entry], () => true)
        return () => undefined
      }
      const leaveUser = add(byUser, holder.userId, entry)
      const leaveToken = holder.credential.tokenId === null
        ? () => undefined
        : add(byToken, holder.credential.tokenId, entry)
      return () => {
        leaveUser()
        leaveToken()
      }
    }

    /** Counts a revocation written here (ops, logout) and applies it at once, before any NOTIFY comes back. */
    const revoked = (r: Revocation, via: "ops" | "logout") =>
      Effect.zipRight(
        Metric.increment(Metric.tagged(Metric.tagged(tokenRevocations, "kind", r.kind), "via", via)),
        applyLogged(r)
      )

    return { isRevoked, hold, revoked, refresh } as const
  })
}) {}
