import { Effect, Schema } from "effect"
import { StreamSettings } from "./streamSettings.js"

/** Too many streams for this user or tenant, or opened too fast (seed 12.13.5): 429 with Retry-After. */
export class TooManyConnections extends Schema.TaggedError<TooManyConnections>()("TooManyConnections", {
  message: Schema.String,
  retryAfterSeconds: Schema.Number
}) {}

/**
 * Stream limits of this runner: open streams per user and per tenant, and a token bucket of new streams per
 * user (reconnect storms after an outage are smoothed by the clients' jittered backoff; this stops the rest).
 * Counted per runner: a load balancer spreads a user's connections, so the cluster-wide bound is this times the
 * number of gateways.
 */
export class ConnectionLimits extends Effect.Service<ConnectionLimits>()("ConnectionLimits", {
  scoped: Effect.gen(function*() {
    const c = yield* StreamSettings.config
    const [perUser, perTenant] = [c.streamsPerUser, c.streamsPerTenant]
    const [ratePerUser, burstPerUser] = [c.opensPerSecond, c.opensBurst]
    const users = new Map<string, number>()
    const tenants = new Map<string, number>()
    const buckets = new Map<string, { tokens: number; at: number }>()

    const take = (user: string, now: number) => {
      const bucket = buckets.get(user) ?? { tokens: burstPerUser, at: now }
      bucket.tokens = Math.min(burstPerUser, bucket.tokens + ((now - bucket.at) / 1000) * ratePerUser)
      bucket.at = now
      buckets.set(user, bucket)
      if (bucket.tokens < 1) return Math.ceil((1 - bucket.tokens) / ratePerUser)
      bucket.tokens -= 1
      return 0
    }
    const bump = (map: Map<string, number>, key: string, by: number) => {
      const n = (map.get(key) ?? 0) + by
      if (n <= 0) map.delete(key)
      else map.set(key, n)
    }

    /**
     * Admits one more stream: the function that gives its place back (call it exactly once), or why not. Plain and
     * synchronous (no span): it runs on every stream open, which must cost ≤ 2 ms of CPU in a reconnect storm.
     */
    const tryAdmit = (tenantId: string, userId: string): (() => void) | TooManyConnections => {
      if ((users.get(userId) ?? 0) >= perUser) {
        return new TooManyConnections({ message: "too many open streams for this user", retryAfterSeconds: 5 })
      }
      if ((tenants.get(tenantId) ?? 0) >= perTenant) {
        return new TooManyConnections({ message: "too many open streams for this tenant", retryAfterSeconds: 5 })
      }
      const wait = take(userId, Date.now())
      if (wait > 0) return new TooManyConnections({ message: "streams opened too fast", retryAfterSeconds: wait })
      bump(users, userId, 1)
      bump(tenants, tenantId, 1)
      let released = false
      return () => {
        if (released) return
        released = true
        bump(users, userId, -1)
        bump(tenants, tenantId, -1)
      }
    }

    /** `tryAdmit` as an Effect. */
    const admit = (tenantId: string, userId: string) =>
      Effect.suspend(() => {
        const admitted = tryAdmit(tenantId, userId)
        return admitted instanceof TooManyConnections ? Effect.fail(admitted) : Effect.succeed(admitted)
      })

    // buckets of users gone quiet are full again: forget them so the map does not grow with every user ever seen
    yield* Effect.sync(() => {
      const now = Date.now()
      for (const [user, bucket] of buckets) {
        if (now - bucket.at > (burstPerUser / ratePerUser) * 1000) buckets.delete(user)
      }
    }).pipe(Effect.zipRight(Effect.sleep("1 minute")), Effect.forever, Effect.forkScoped)

    return { admit, tryAdmit } as const
  })
}) {}
