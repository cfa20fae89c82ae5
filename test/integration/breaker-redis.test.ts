import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Context, Duration, Effect, Layer, Logger, LogLevel, Option, TestClock } from "effect"
import { Redis as IORedis } from "ioredis"
import * as B from "../../src/domain/breaker.js"
import { BREAKER_STEP, decodeState } from "../../src/quota/breakerScript.js"
import { ProviderBreaker } from "../../src/quota/ProviderBreaker.js"
import * as Redis from "../../src/redis/Redis.js"
import { services } from "../support/env.js"
import { freePort } from "../support/runner.js"

/** Like DATABASE_URL: without REDIS_URL these tests are skipped locally, and must not be in CI. */
const redisUrl = services.redisUrl

const admin = Effect.acquireRelease(Effect.sync(() => new IORedis(redisUrl!)), (c) => Effect.promise(() => c.quit()))

/** A unique key prefix for one test; every key it leaves must expire, and is deleted afterwards. */
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

const settings = {
  BREAKER_MIN_CALLS: "4",
  BREAKER_ERROR_RATE: "0.5",
  BREAKER_WINDOW: "10 seconds",
  BREAKER_OPEN_FOR: "2 seconds",
  BREAKER_OPEN_MAX: "8 seconds",
  BREAKER_PROBES: "2",
  BREAKER_PROBE_TIMEOUT: "5 seconds"
}

/** One ProviderBreaker with its own Redis connection, like one runner process. */
const makeBreaker = (prefix: string, url = redisUrl!) =>
  Layer.build(
    ProviderBreaker.Default.pipe(
      Layer.provide(Redis.layer(url, prefix)),
      Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(settings))))),
      Layer.provide(Logger.minimumLogLevel(LogLevel.Error))
    )
  ).pipe(Effect.map((ctx) => Context.get(ctx, ProviderBreaker)))

const route = { provider: "runway", model: "gen4.5" }
const fail = Effect.fail("HTTP 503")
const sent = Effect.succeed("ok")

describe.skipIf(redisUrl === undefined)("provider breaker on Redis", () => {
  it.scoped("the Lua step and the TypeScript machine agree on random sequences of steps", () =>
    Effect.gen(function*() {
      const redis = yield* admin
      const prefix = yield* testPrefix
      const config: B.BreakerConfig = {
        errorRate: 0.5,
        minCalls: 4,
        windowMs: 5_000,
        openForMs: 700,
        openMaxMs: 3_000,
        probes: 2,
        probeTimeoutMs: 1_500
      }
      // a seeded generator: a failure names its sequence
      let seed = 42
      const random = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31
      const seen = new Set<string>()
      for (let run = 0; run < 20; run++) {
        const key = `${prefix}twin:${run}`
        // an absent key is a closed breaker since the step that finds it absent
        let st: B.BreakerState | null = null
        let now = 1_000_000
        let probe = false
        for (let i = 0; i < 60; i++) {
          now += Math.floor(random() * 400)
          const r = random()
          const op = r < 0.4 ? "admit" : r < 0.5 ? "peek" : "record"
          const fault = random() < 0.6
          const lua = yield* Effect.promise(() =>
            redis.eval(
              BREAKER_STEP,
              1,
              key,
              op,
              now,
              config.errorRate,
              config.minCalls,
              config.windowMs,
              config.openForMs,
              config.openMaxMs,
              config.probes,
              config.probeTimeoutMs,
              "p",
              `m${run}`,
              fault ? 1 : 0,
              probe ? 1 : 0,
              B.BUCKETS
            ) as Promise<[number, number, string, string, string, string]>
          )
          const stored = Option.getOrThrow(decodeState(lua[5]))
          st ??= B.closedState("p", `m${run}`, now)
          seen.add(lua[4] === "" ? lua[3] : `${lua[4]} → ${lua[3]}`)
          const where = `run ${run}, step ${i} (${op} at ${now})`
          if (op === "record") {
            const step = B.record(st, now, config, fault, probe)
            expect([lua[3], lua[4]], where).toEqual([step.state.s, step.from ?? ""])
            st = step.state
          } else {
            const step = B.admit(st, now, config, op === "admit")
            const r = step.result
            expect([lua[0], lua[1], Number(lua[2]), lua[3], lua[4]], where).toEqual([
              r._tag === "Admitted" ? 1 : 0,
              r._tag === "Admitted" && r.probe ? 1 : 0,
              r._tag === "Refused" ? r.waitMs : 0,
              step.state.s,
              step.from ?? ""
            ])
            st = step.state
            if (op === "admit") probe = r._tag === "Admitted" && r.probe
          }
          expect(stored, where).toEqual(st)
          // a look at a closed breaker writes nothing: the key stays absent, closed since whenever it is first written
          if ((yield* Effect.promise(() => redis.exists(key))) === 0) st = null
        }
      }
      // the sequences went through every transition
      expect([...seen].sort()).toEqual(
        ["closed", "closed → open", "half_open", "half_open → closed", "half_open → open", "open", "open → half_open"]
      )
    }))

  it.scoped("two runners' breakers on one Redis share the state: one trips, the other refuses; a reset frees both", () =>
    Effect.gen(function*() {
      const prefix = yield* testPrefix
      const one = yield* makeBreaker(prefix)
      const two = yield* makeBreaker(prefix)
      for (let i = 0; i < 4; i++) yield* one.guard(route, "query", fail, () => true)
      let calls = 0
      const counted = Effect.sync(() => ++calls)
      const refused = yield* two.guard(route, "submit", counted, () => true)
      expect(refused._tag).toBe("Refused")
      expect(calls).toBe(0)
      // another model and another provider go on
      expect((yield* two.guard({ ...route, model: "veo3.1" }, "query", counted, () => true))._tag).toBe("Sent")
      expect((yield* two.guard({ provider: "luma", model: "ray-2" }, "query", counted, () => true))._tag).toBe("Sent")
      const listed = yield* two.list
      expect(listed.shared).toBe(true)
      expect(listed.breakers.find((b) => b.model === "gen4.5")).toMatchObject({ state: "open", source: "redis" })

      // the cool-down (the steps take the caller's clock: the TestClock here)
      yield* TestClock.adjust(Duration.seconds(2))
      const probes = [yield* one.admit(route, "query"), yield* two.admit(route, "query")]
      expect(probes).toEqual([{ _tag: "Admitted", probe: true }, { _tag: "Admitted", probe: true }])
      // both probes are out, on either runner: a third call waits
      expect((yield* one.admit(route, "query"))._tag).toBe("Refused")
      // one probe fails: open again, for twice as long
      yield* two.record(route, true, true)
      yield* TestClock.adjust(Duration.seconds(2))
      expect((yield* one.admit(route, "query"))._tag).toBe("Refused")
      yield* TestClock.adjust(Duration.seconds(2))
      yield* one.guard(route, "query", sent, () => true)
      yield* two.guard(route, "query", sent, () => true)
      expect((yield* one.list).breakers.find((b) => b.model === "gen4.5")?.state).toBe("closed")

      // tripped again, then reset by an operator on one runner: the other sends at once
      for (let i = 0; i < 4; i++) yield* one.guard(route, "query", fail, () => true)
      expect((yield* two.admit(route, "query"))._tag).toBe("Refused")
      const reset = yield* one.reset("runway", Option.some("gen4.5"))
      expect(reset).toEqual([{ provider: "runway", model: "gen4.5", from: "open" }])
      expect(yield* two.admit(route, "query")).toEqual({ _tag: "Admitted", probe: false })
    }))

  it.scoped("with Redis unreachable, each runner's local breaker trips on its own faults", () =>
    Effect.gen(function*() {
      const prefix = yield* testPrefix
      // a port nobody listens on: every Redis call fails at once
      const port = yield* freePort
      const breaker = yield* makeBreaker(prefix, `redis://127.0.0.1:${port}`)
      for (let i = 0; i < 4; i++) {
        expect((yield* breaker.guard(route, "query", fail, () => true))._tag).toBe("Sent")
      }
      expect((yield* breaker.guard(route, "query", sent, () => true))._tag).toBe("Refused")
      expect((yield* breaker.guard({ ...route, model: "veo3.1" }, "query", sent, () => true))._tag).toBe("Sent")
      const listed = yield* breaker.list
      expect(listed.shared).toBe(false)
      expect(listed.breakers.find((b) => b.model === "gen4.5")).toMatchObject({ state: "open", source: "local" })
      // and nothing reached the shared state
      const redis = yield* admin
      expect(yield* Effect.promise(() => redis.keys(`${prefix}*`))).toEqual([])
    }))
})
