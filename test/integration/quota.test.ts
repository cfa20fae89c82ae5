import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Context, Duration, Effect, Fiber, Layer, Logger, LogLevel, Schedule } from "effect"
import { Redis as IORedis } from "ioredis"
import { ProviderQuota, type QuotaScope } from "../../src/quota/ProviderQuota.js"
import * as Redis from "../../src/redis/Redis.js"
import { until } from "../support/admin.js"
import { scaled, services } from "../support/env.js"
import { startTcpProxy } from "../support/tcpProxy.js"

/** Like DATABASE_URL: without REDIS_URL these tests are skipped locally, and must not be in CI. */
const redisUrl = services.redisUrl

const BURST = 0.05 // QUOTA_BURST default, in seconds

/** A connection of the test's own, to look at the keys. */
const admin = Effect.acquireRelease(Effect.sync(() => new IORedis(redisUrl!)), (c) => Effect.promise(() => c.quit()))

/** A unique key prefix for one test; its keys must all expire (no garbage left) and are deleted afterwards. */
const testPrefix = Effect.acquireRelease(
  Effect.sync(() => `test:${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}:`),
  (prefix) =>
    Effect.gen(function*() {
      const redis = yield* admin
      const keys = yield* Effect.promise(() => redis.keys(`${prefix}*`))
      const ttls = yield* Effect.promise(() => Promise.all(keys.map((k) => redis.pttl(k))))
      if (keys.length > 0) yield* Effect.promise(() => redis.del(...keys))
      expect(ttls.filter((t) => t === -1)).toEqual([])
    }).pipe(Effect.scoped)
)

/** How far (ms) a bucket's theoretical arrival time is ahead of Redis' clock: the backlog reserved in it. */
const aheadOf = (redis: IORedis, key: string) =>
  Effect.promise(async () => {
    const [[, tat], [, time]] = (await redis.multi().get(key).time().exec())! as [
      [null, string | null],
      [null, [string, string]]
    ]
    return tat === null ? 0 : Number(tat) - (Number(time[0]) * 1000 + Number(time[1]) / 1000)
  })

/** One ProviderQuota with its own Redis connection, like one runner process. */
const makeQuota = (prefix: string, env: Record<string, string>, url = redisUrl!) =>
  Layer.build(
    ProviderQuota.Default.pipe(
      Layer.provide(Redis.layer(url, prefix)),
      Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))),
      Layer.provide(Logger.minimumLogLevel(LogLevel.Warning))
    )
  ).pipe(Effect.map((ctx) => Context.get(ctx, ProviderQuota)))

interface Grant {
  readonly caller: number
  readonly at: number // ms since the start
  readonly waited: number
}

/**
 * `callers` fibers, each acquiring again as soon as it is granted, for `seconds`; every grant is recorded, with how
 * long the whole run really took (a starved test process runs late, never early).
 */
const hammer = (callers: number, seconds: number, acquire: (caller: number) => Effect.Effect<void>) =>
  Effect.gen(function*() {
    const start = Date.now()
    const grants: Array<Grant> = []
    yield* Effect.forEach(Array.from({ length: callers }, (_, i) => i), (caller) =>
      Effect.gen(function*() {
        const asked = Date.now()
        yield* acquire(caller)
        grants.push({ caller, at: Date.now() - start, waited: Date.now() - asked })
      }).pipe(Effect.forever), { concurrency: "unbounded", discard: true }).pipe(
        Effect.timeout(Duration.seconds(seconds)),
        Effect.ignore
      )
    return { grants, elapsedS: (Date.now() - start) / 1000 }
  })

/**
 * The quota's promise, whatever the machine's speed: grants never exceed qps × the time that really passed, plus the
 * burst (the limiter is timed by Redis, and a slow caller only falls behind). That the quota is also used, not
 * starved, is checked loosely: at least half of it (a CPU-starved test process takes grants late).
 */
const expectRate = (count: number, qps: number, elapsedS: number) => {
  const ceiling = qps * elapsedS + Math.max(1, qps * BURST)
  expect(count).toBeLessThanOrEqual(ceiling + 1)
  expect(count).toBeGreaterThanOrEqual(ceiling / 2)
}
const within = (grants: ReadonlyArray<Grant>, fromS: number, toS: number) =>
  grants.filter((g) => g.at >= fromS * 1000 && g.at < toS * 1000)

const scope = (tenant: number, provider = "acme"): QuotaScope => ({ provider, tenantId: `tenant-${tenant}` })

describe.skipIf(redisUrl === undefined)("ProviderQuota (Redis)", () => {
  it.live("rate: 200 callers against 50 QPS are granted 50 per second, burst aside", () =>
    Effect.gen(function*() {
      const quota = yield* makeQuota(yield* testPrefix, { QUOTA_ACME_QPS: "50" })
      const { elapsedS, grants } = yield* hammer(200, 4, (i) => quota.acquire(scope(i % 4)))
      const steady = within(grants, 1, 4).length
      console.log(`rate: ${grants.length} grants in ${elapsedS} s, ${steady} in 1-4 s (${(steady / 3).toFixed(2)}/s)`)
      expectRate(grants.length, 50, elapsedS)
    }).pipe(Effect.scoped))

  it.live("shared: two runners with their own connections stay within the one quota together", () =>
    Effect.gen(function*() {
      const prefix = yield* testPrefix
      const a = yield* makeQuota(prefix, { QUOTA_ACME_QPS: "50" })
      const b = yield* makeQuota(prefix, { QUOTA_ACME_QPS: "50" })
      const { elapsedS, grants } = yield* hammer(100, 4, (i) => (i % 2 === 0 ? a : b).acquire(scope(i % 4)))
      const ofA = grants.filter((g) => g.caller % 2 === 0).length
      console.log(`shared: ${grants.length} grants in ${elapsedS} s (runner A ${ofA}, runner B ${grants.length - ofA})`)
      expectRate(grants.length, 50, elapsedS)
      expect(Math.min(ofA, grants.length - ofA)).toBeGreaterThan(grants.length / 4)
    }).pipe(Effect.scoped))

  it.live("levels: a lower tenant limit binds, and one tenant's backlog does not hold up another", () =>
    Effect.gen(function*() {
      const prefix = yield* testPrefix
      const quota = yield* makeQuota(prefix, { QUOTA_ACME_QPS: "50", QUOTA_TENANT_QPS: "10" })
      const backlog = aheadOf(yield* admin, `${prefix}quota:tenant:tenant-0:acme`)
      const [{ elapsedS, grants }, late] = yield* Effect.all([
        hammer(60, 3, (i) => quota.acquire(scope(i % 2))),
        // a third tenant arriving once tenants 0 and 1 have a second of backlog or more is served at once
        backlog.pipe(
          Effect.filterOrFail((ms) => ms >= 1000, () => "no backlog yet"),
          Effect.retry(Schedule.spaced(Duration.millis(20)).pipe(Schedule.upTo(Duration.millis(scaled(3_000))))),
          Effect.orDie,
          Effect.zipRight(Effect.timed(quota.acquire(scope(2))))
        )
      ], { concurrency: "unbounded" })
      const of0 = grants.filter((g) => g.caller % 2 === 0).length
      console.log(
        `levels: tenant 0 ${of0}, tenant 1 ${grants.length - of0} grants in ${elapsedS} s; tenant 2 waited ${
          Duration.toMillis(late[0])
        } ms`
      )
      expectRate(of0, 10, elapsedS)
      expectRate(grants.length - of0, 10, elapsedS)
      // tenants 0 and 1 have ~3 s of backlog each by then: tenant 2 does not queue behind it
      expect(Duration.toMillis(late[0])).toBeLessThan(scaled(1000))
    }).pipe(Effect.scoped))

  it.live("fairness: with demand far above the quota, every caller is served in turn", () =>
    Effect.gen(function*() {
      const quota = yield* makeQuota(yield* testPrefix, { QUOTA_ACME_QPS: "25", QUOTA_TENANT_QPS: "1000" })
      const callers = 50
      const { grants } = yield* hammer(callers, 6, (i) => quota.acquire(scope(i % 5)))
      const perCaller = Array.from({ length: callers }, (_, i) => grants.filter((g) => g.caller === i).length)
      const longest = Math.max(...grants.map((g) => g.waited))
      console.log(
        `fairness: grants per caller ${Math.min(...perCaller)}-${
          Math.max(...perCaller)
        }, longest wait ${longest} ms (N / rate = ${(callers / 25) * 1000} ms)`
      )
      expect(Math.min(...perCaller)).toBeGreaterThanOrEqual(2)
      expect(longest).toBeLessThan(scaled((callers / 25) * 1000 + 500))
    }).pipe(Effect.scoped))

  it.live("fallback: with Redis unreachable, acquire works at the local conservative share of the rate", () =>
    Effect.gen(function*() {
      const quota = yield* makeQuota(yield* testPrefix, { QUOTA_ACME_QPS: "20" }, "redis://127.0.0.1:1")
      const { elapsedS, grants } = yield* hammer(40, 3, (i) => quota.acquire(scope(i % 4)))
      console.log(`fallback: ${grants.length} grants in ${elapsedS} s at a 20 QPS quota (local share 0.5)`)
      expectRate(grants.length, 10, elapsedS)
    }).pipe(Effect.scoped))

  it.live("fallback: goes back to the shared Redis buckets as soon as Redis answers again", () =>
    Effect.gen(function*() {
      const prefix = yield* testPrefix
      const proxy = yield* Effect.acquireRelease(
        Effect.promise(() => startTcpProxy(Number(new URL(redisUrl!).port || 6379), new URL(redisUrl!).hostname)),
        (p) => Effect.promise(() => p.close())
      )
      const quota = yield* makeQuota(prefix, { QUOTA_REDIS_TIMEOUT: "200 millis" }, `redis://127.0.0.1:${proxy.port}`)
      const redis = yield* admin
      const providerTat = Effect.promise(() => redis.get(`${prefix}quota:provider:acme`))
      yield* quota.acquire(scope(0))
      expect(yield* providerTat).not.toBeNull()
      proxy.pause()
      yield* Effect.promise(() => redis.del(`${prefix}quota:provider:acme`))
      yield* Effect.timed(quota.acquire(scope(0))).pipe(
        Effect.map(([d]) => expect(Duration.toMillis(d)).toBeLessThan(scaled(300))),
        Effect.repeatN(5)
      )
      expect(yield* providerTat).toBeNull()
      proxy.resume()
      const started = Date.now()
      // acquire until a grant is taken from the shared bucket again
      yield* quota.acquire(scope(0)).pipe(
        Effect.zipRight(providerTat),
        Effect.filterOrFail((tat) => tat !== null, () => "still local"),
        Effect.retry(Schedule.spaced(Duration.millis(50)).pipe(Schedule.upTo(Duration.millis(scaled(5_000))))),
        Effect.orDie
      )
      console.log(`recovery: shared again ${Date.now() - started} ms after Redis came back`)
    }).pipe(Effect.scoped))

  it.live("horizon: a backlog beyond QUOTA_MAX_WAIT is not reserved; those callers come back and are served", () =>
    Effect.gen(function*() {
      const prefix = yield* testPrefix
      const quota = yield* makeQuota(prefix, { QUOTA_ACME_QPS: "20", QUOTA_MAX_WAIT: "1 second" })
      const ahead = aheadOf(yield* admin, `${prefix}quota:provider:acme`)
      const fiber = yield* Effect.forEach(
        Array.from({ length: 60 }, (_, i) => i),
        (i) => Effect.timed(quota.acquire(scope(i % 4))),
        { concurrency: "unbounded" }
      ).pipe(Effect.fork)
      // how far ahead reservations reach, sampled all the while the callers are served
      let reservedAhead = 0
      const sampler = yield* ahead.pipe(
        Effect.map((ms) => (reservedAhead = Math.max(reservedAhead, ms))),
        Effect.repeat(Schedule.spaced(Duration.millis(20))),
        Effect.fork
      )
      const waits = (yield* fiber.await.pipe(Effect.flatten)).map(([d]) => Duration.toMillis(d))
      yield* Fiber.interrupt(sampler)
      console.log(
        `horizon: reservations reached ${reservedAhead.toFixed(0)} ms ahead; 60 callers served, last after ${
          Math.max(...waits).toFixed(0)
        } ms`
      )
      expect(reservedAhead).toBeLessThanOrEqual(1000 + 50 + 50 + 1) // horizon + burst + one interval
      expect(reservedAhead).toBeGreaterThan(500) // the backlog did reach towards the horizon
      expect(Math.max(...waits)).toBeGreaterThan(2_500) // 60 grants at 20/s take 3 s: the later ones came back
      expect(Math.max(...waits)).toBeLessThan(scaled(6_000))
    }).pipe(Effect.scoped))

  it.live("within: a caller refused because the line is longer than it waits reserves nothing (an idle task)", () =>
    Effect.gen(function*() {
      const prefix = yield* testPrefix
      const quota = yield* makeQuota(prefix, { QUOTA_ACME_QPS: "10" })
      const ahead = aheadOf(yield* admin, `${prefix}quota:provider:acme`)
      // 20 reservations at 10/s: the line is about 2 s long
      const line = yield* Effect.forEach(Array.from({ length: 20 }, (_, i) => i), (i) => quota.acquire(scope(i % 4)), {
        concurrency: "unbounded"
      }).pipe(Effect.fork)
      // the 20 reservations are in the line (about 2 s of it)
      yield* until("the line reserved", ahead, (ms) => ms >= 1_500)
      const before = yield* ahead
      expect(yield* quota.acquireWithin(scope(8), 200)).toBe(false)
      // refused: the line is no longer than before (allowing for the time that passed)
      expect(yield* ahead).toBeLessThanOrEqual(before)
      // a caller that would wait as long as the line is let in, and waits its turn
      const [waited, granted] = yield* Effect.timed(quota.acquireWithin(scope(9), 5_000))
      expect(granted).toBe(true)
      expect(Duration.toMillis(waited)).toBeGreaterThan(1_000)
      yield* Fiber.join(line)
    }).pipe(Effect.scoped))

  it.live("penalize: after a 429 with Retry-After 1 s, the next acquire on any runner waits about 1 s", () =>
    Effect.gen(function*() {
      const prefix = yield* testPrefix
      const a = yield* makeQuota(prefix, { QUOTA_ACME_QPS: "50" })
      const b = yield* makeQuota(prefix, { QUOTA_ACME_QPS: "50" })
      yield* a.acquire(scope(0))
      // timed from before the penalty: a starved process can only make the measured wait longer, never shorter
      const [waited] = yield* Effect.timed(
        a.penalize("acme", Duration.seconds(1)).pipe(Effect.zipRight(b.acquire(scope(1))))
      )
      const [other] = yield* Effect.timed(b.acquire(scope(1, "other")))
      console.log(
        `penalize: next acquire waited ${Duration.toMillis(waited)} ms; another provider ${Duration.toMillis(other)} ms`
      )
      expect(Duration.toMillis(waited)).toBeGreaterThanOrEqual(950)
      expect(Duration.toMillis(waited)).toBeLessThan(scaled(1_500))
      // another provider is not held by acme's penalty (it would wait ~1 s)
      expect(Duration.toMillis(other)).toBeLessThan(scaled(500))
    }).pipe(Effect.scoped))
})
