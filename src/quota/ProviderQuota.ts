import { Clock, Duration, Effect, Metric, Option, Schedule } from "effect"
import * as S from "../config/Settings.js"
import { quotaGrants, quotaLimitQps, quotaWaitSeconds } from "../observability/metrics.js"
import { seriesBy } from "../observability/series.js"
import { Redis } from "../redis/Redis.js"
import { makeSharedOrLocal } from "../redis/sharedOrLocal.js"

const quotaWaits = seriesBy(quotaWaitSeconds, "provider")
const grants = seriesBy(quotaGrants, "provider")

export interface QuotaScope {
  readonly provider: string
  readonly tenantId: string
}

// Redis' clock, so that runners with skewed clocks agree
const NOW = `local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000`

/**
 * GCRA with reservations, one TAT (theoretical arrival time, ms) per key, levels narrowest first: 0 tenant (per
 * provider), 1 provider, 2 global. A caller passes the levels in order, like a line of FIFO queues: the levels that
 * are free now are charged now; the first backlogged one reserves the caller's place (its TAT - burst) and stops
 * there. After sleeping to that slot the caller takes the remaining levels. Reserving one joint slot in all three
 * keys would be simpler but wrong: a tenant's own backlog would push the provider's and the global TAT minutes
 * ahead and stall every other tenant and provider behind it. Levels are checked narrow to wide so that a backlog
 * only ever holds tokens of keys whose every user has to pass the same backlog anyway.
 * Returns {wait ms, next level}; next 3 means done, -1 that the slot is past the horizon (nothing reserved).
 */
const TAKE = `${NOW}
local from, tau, horizon = tonumber(ARGV[1]) + 1, tonumber(ARGV[5]), tonumber(ARGV[6])
local tat, stop, slot = {}, 4, now
for k = from, 3 do
  tat[k] = tonumber(redis.call("GET", KEYS[k]) or "0")
  if tat[k] - tau > now then stop, slot = k, tat[k] - tau break end
end
if slot - now > horizon then return {string.format("%.3f", slot - now), -1} end
for k = from, math.min(stop, 3) do
  local later = math.max(tat[k], now) + tonumber(ARGV[k + 1])
  redis.call("SET", KEYS[k], string.format("%.3f", later), "PX", math.ceil(later - now) + 1000)
end
return {string.format("%.3f", slot - now), math.min(stop, 3)}
`

const PENALIZE = `${NOW}
local tat = math.max(tonumber(redis.call("GET", KEYS[1]) or "0"), now + tonumber(ARGV[1]))
redis.call("SET", KEYS[1], string.format("%.3f", tat), "PX", math.ceil(tat - now) + 1000)
`

interface QuotaCommands {
  providerQuotaTake(...args: ReadonlyArray<string | number>): Promise<[string, number]>
  providerQuotaPenalize(key: string, ms: number): Promise<unknown>
}

type Levels<A> = readonly [A, A, A]

export const QuotaSettings = S.area("Quota", "query rates at the providers, shared by all runners through Redis", {
  globalQps: S.positiveNumber("QUOTA_GLOBAL_QPS", "provider queries per second, all providers together", 1000),
  providerQps: S.positiveNumber(
    "QUOTA_PROVIDER_QPS",
    "queries per second per provider; `QUOTA_<PROVIDER>_QPS` (e.g. QUOTA_OPENAI_QPS) overrides it for one, read on " +
      "first use since the set of providers is open",
    200
  ),
  tenantQps: S.positiveNumber("QUOTA_TENANT_QPS", "queries per second per tenant at one provider", 100),
  burst: S.positiveNumber(
    "QUOTA_BURST",
    "burst tolerance in seconds: how early a slot may be taken ahead of its turn",
    0.05
  ),
  maxWait: S.refine(
    S.duration(
      "QUOTA_MAX_WAIT",
      "how far ahead a caller may reserve its slot; the sweeper allows polls this long too",
      "60 seconds"
    ),
    "must be > 0",
    Duration.greaterThan(Duration.zero)
  ),
  // How long a Redis answer is waited for before the local buckets take over. A timed-out call may still have
  // reserved its slot in Redis, so the local grant then comes on top: measured under a saturated event loop, a
  // 200 ms timeout fired on healthy Redis and 5 s query rates reached 135% of the quota. A dead connection
  // fails at once anyway (no offline queue); this only bounds an unresponsive one.
  redisTimeout: S.duration(
    "QUOTA_REDIS_TIMEOUT",
    "how long a Redis answer is awaited before the local buckets take over (200 ms fired on healthy Redis under " +
      "load and let 5 s rates reach 135% of the quota)",
    "1 second"
  ),
  localShare: S.refine(
    S.positiveNumber(
      "QUOTA_LOCAL_SHARE",
      "share of each rate a runner grants itself while a configured Redis does not answer (0–1)",
      0.5
    ),
    "must be at most 1",
    (n) => n <= 1
  )
})

/**
 * Query quotas per provider: every poll of a provider's query API first takes a token at three levels (global,
 * provider, tenant per provider), shared by all runners through Redis. Callers wait in line (first come, first
 * served at each level) instead of retrying, so none starves. Without Redis the same buckets live in this process:
 * at the full rate when no REDIS_URL is configured (one process), at QUOTA_LOCAL_SHARE of it while a configured
 * Redis does not answer (other runners are probably polling too).
 */
export class ProviderQuota extends Effect.Service<ProviderQuota>()("ProviderQuota", {
  scoped: Effect.gen(function*() {
    const { client, keyPrefix } = yield* Redis
    const c = yield* QuotaSettings.config
    const { globalQps, providerQps, tenantQps, redisTimeout } = c
    const tau = c.burst * 1000
    const horizon = Duration.toMillis(c.maxWait)
    const share = Option.isSome(client) ? c.localShare : 1
    // provider overrides are read on first use: the set of providers is open
    const configProvider = yield* Effect.configProviderWith(Effect.succeed)

    const redis = Option.map(client, (c) => {
      c.defineCommand("providerQuotaTake", { numberOfKeys: 3, lua: TAKE })
      c.defineCommand("providerQuotaPenalize", { numberOfKeys: 1, lua: PENALIZE })
      return c as unknown as QuotaCommands
    })
    if (Option.isNone(redis)) yield* Effect.logInfo("no REDIS_URL: provider quotas are enforced in this process only")

    const limits = new Map<string, { readonly shared: Levels<number>; readonly local: Levels<number> }>()
    const limitsOf = (provider: string) =>
      Effect.suspend(() => {
        const known = limits.get(provider)
        if (known !== undefined) return Effect.succeed(known)
        const name = `QUOTA_${provider.toUpperCase().replace(/[^A-Z0-9]/g, "_")}_QPS`
        return configProvider.load(S.positiveNumber(name, "this provider's QPS", providerQps).config).pipe(
          Effect.catchAll((error) =>
            Effect.as(Effect.logError(`invalid ${name}: using QUOTA_PROVIDER_QPS`, error), providerQps)
          ),
          Effect.map((qps) => {
            quotaLimitQps.pipe(Metric.tagged("provider", provider)).unsafeUpdate(qps, [])
            const ms = (rate: number, scale: number) => 1000 / (rate * scale)
            const per = (s: number): Levels<number> => [ms(tenantQps, s), ms(qps, s), ms(globalQps, s)]
            limits.set(provider, { shared: per(1), local: per(share) })
            return limits.get(provider)!
          })
        )
      })

    const local = new Map<string, number>()
    /** The in-process twin of TAKE, for when Redis is not configured or does not answer. */
    const takeLocal = (
      keys: Levels<string>,
      from: number,
      intervals: Levels<number>,
      now: number,
      horizon: number
    ) => {
      let [stop, slot] = [3, now]
      for (let k = from; k < 3 && stop === 3; k++) {
        const tat = local.get(keys[k]!) ?? 0
        if (tat - tau > now) [stop, slot] = [k, tat - tau]
      }
      if (slot - now > horizon) return { wait: slot - now, next: -1 }
      for (let k = from; k <= Math.min(stop, 2); k++) {
        local.set(keys[k]!, Math.max(local.get(keys[k]!) ?? 0, now) + intervals[k]!)
      }
      return { wait: slot - now, next: Math.min(stop + 1, 3) }
    }
    yield* Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      for (const [key, tat] of local) if (tat < now) local.delete(key)
    }).pipe(Effect.repeat(Schedule.spaced(Duration.minutes(1))), Effect.forkScoped)

    /** A Redis call; None (the caller goes local) when Redis fails or is slow. */
    const viaRedis = makeSharedOrLocal({
      client: redis,
      timeout: redisTimeout,
      degraded: "Redis unavailable: provider quotas fall back to a conservative local share",
      recovered: "Redis answers again: provider quotas are shared again",
      annotations: { local_share: share }
    })

    const take = (
      keys: Levels<string>,
      from: number,
      limit: { shared: Levels<number>; local: Levels<number> },
      horizon: number
    ) =>
      Effect.gen(function*() {
        const shared = yield* viaRedis(
          (c) => c.providerQuotaTake(...keys, from, ...limit.shared, tau, horizon),
          Option.some
        )
        if (Option.isSome(shared)) return { wait: Number(shared.value[0]), next: Number(shared.value[1]) }
        return takeLocal(keys, from, limit.local, yield* Clock.currentTimeMillis, horizon)
      })

    const providerKey = (provider: string) => `${keyPrefix}quota:provider:${provider}`

    /**
     * Waits until a query slot is granted at all three levels. With `within` (ms), a caller whose place in line is
     * further than that gets false at once, with nothing reserved (an idle task's runner then waits for it).
     */
    const take3 = Effect.fn("ProviderQuota.acquire")(function*(scope: QuotaScope, within: number | null) {
      yield* Effect.annotateCurrentSpan({ provider: scope.provider, tenant_id: scope.tenantId })
      const limit = yield* limitsOf(scope.provider)
      const keys: Levels<string> = [
        `${keyPrefix}quota:tenant:${scope.tenantId}:${scope.provider}`,
        providerKey(scope.provider),
        `${keyPrefix}quota:global`
      ]
      const started = yield* Clock.currentTimeMillis
      let from = 0
      while (from < 3) {
        // a caller that waits at most `within` (shorter than the horizon) asks only so far, and goes if refused
        const short = from === 0 && within !== null && within < horizon
        const step = yield* take(keys, from, limit, short ? within : horizon)
        if (step.next < 0 && short) return false
        if (step.next < 0) {
          // the line is longer than the horizon: come back about when this caller's place would fit in it
          const retryIn = Math.min(horizon, Math.max(step.wait - horizon, horizon / 20)) * (0.75 + Math.random() / 2)
          yield* Effect.logDebug("provider quota backlog beyond QUOTA_MAX_WAIT: retrying later").pipe(
            Effect.annotateLogs({ provider: scope.provider, tenant_id: scope.tenantId, retry_in_ms: retryIn })
          )
          yield* Effect.sleep(Duration.millis(retryIn))
          continue
        }
        if (step.wait > 0) yield* Effect.sleep(Duration.millis(step.wait))
        from = step.next
      }
      const waited = ((yield* Clock.currentTimeMillis) - started) / 1000
      yield* Metric.update(quotaWaits(scope.provider), waited)
      yield* Metric.increment(grants(scope.provider))
      return true
    })
    /** Waits until a query slot is granted at all three levels, then returns. Never fails. */
    const acquire = (scope: QuotaScope) => Effect.asVoid(take3(scope, null))
    /** A slot within `ms`, waited for (true); or false at once, nothing reserved, when the line is longer. */
    const acquireWithin = (scope: QuotaScope, ms: number) => take3(scope, ms)

    /** Pushes the provider's bucket back after a 429 with Retry-After (every runner then waits). */
    const penalize = Effect.fn("ProviderQuota.penalize")(function*(provider: string, delay: Duration.Duration) {
      const key = providerKey(provider)
      // the slot opens burst earlier than the TAT: add it so that nobody polls before the delay is over
      const ms = Duration.toMillis(delay) + tau
      const now = yield* Clock.currentTimeMillis
      local.set(key, Math.max(local.get(key) ?? 0, now + ms))
      yield* viaRedis((c) => c.providerQuotaPenalize(key, ms), Option.some)
      yield* Effect.logInfo("provider quota penalized").pipe(
        Effect.annotateLogs({ provider, delay_ms: Duration.toMillis(delay) })
      )
    })

    return { acquire, acquireWithin, penalize } as const
  }).pipe(Effect.orDie)
}) {}
