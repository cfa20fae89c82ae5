import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Exit, Layer, Schedule, Scope } from "effect"
import { Redis as IORedis } from "ioredis"
import * as Bus from "../../src/bus/NotificationBus.js"
import * as Redis from "../../src/redis/Redis.js"
import { buildBus, collect, eventually, sharedBusTests } from "../support/busCases.js"
import { scaled, services } from "../support/env.js"
import { startTcpProxy } from "../support/tcpProxy.js"

/** Like DATABASE_URL: without REDIS_URL the Redis tests are skipped locally, and must not be in CI. */
const redisUrl = services.redisUrl

/** A key prefix of its own per test, so that channels of parallel runs never meet. */
const uniquePrefix = () => `test:${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}:`

/** One runner's bus with its own Redis connections. */
const redisBus = (prefix: string, url = redisUrl!) =>
  buildBus(Bus.layerRedis.pipe(Layer.provide(Redis.layer(url, prefix))))

/** A connection of the test's own, to look at the server's subscriptions. */
const admin = Effect.acquireRelease(Effect.sync(() => new IORedis(redisUrl!)), (c) => Effect.promise(() => c.quit()))
const numsub = (redis: IORedis, channel: string) =>
  Effect.promise(() => redis.pubsub("NUMSUB", channel) as Promise<[string, number]>).pipe(Effect.map(([, n]) => n))

describe.skipIf(redisUrl === undefined)("NotificationBus (Redis)", () => {
  sharedBusTests(
    Effect.suspend(() => {
      const prefix = uniquePrefix()
      return Effect.all([redisBus(prefix), redisBus(prefix)])
    }),
    "redis"
  )

  it.scopedLive("refcount: local subscribers of a project share one Redis subscription; the last one removes it", () =>
    Effect.gen(function*() {
      const prefix = uniquePrefix()
      const bus = yield* redisBus(prefix)
      const redis = yield* admin
      const channel = `${prefix}project:a`
      const first = yield* Scope.make()
      const second = yield* Scope.make()
      yield* bus.subscribe("a").pipe(Scope.extend(first))
      yield* bus.subscribe("a").pipe(Scope.extend(second))
      expect(yield* numsub(redis, channel)).toBe(1)
      yield* Scope.close(first, Exit.void)
      expect(yield* numsub(redis, channel)).toBe(1)
      const seen = yield* collect(yield* bus.subscribe("a").pipe(Scope.extend(second)))
      yield* bus.publish("a", "still live")
      yield* eventually(() => expect(seen).toEqual(["still live"]))
      yield* Scope.close(second, Exit.void)
      expect(yield* numsub(redis, channel)).toBe(0)
      // and the next subscriber subscribes again
      const third = yield* collect(yield* bus.subscribe("a"))
      expect(yield* numsub(redis, channel)).toBe(1)
      yield* bus.publish("a", "again")
      yield* eventually(() => expect(third).toEqual(["again"]))
    }))

  it.scopedLive("SUBSCRIBEs of one turn go together: every listener is live once listen returns; a removed one is unsubscribed", () =>
    Effect.gen(function*() {
      const prefix = uniquePrefix()
      const bus = yield* redisBus(prefix)
      const redis = yield* admin
      const projects = Array.from({ length: 200 }, (_, i) => `p${i}`)
      const seen = new Map<string, Array<string>>(projects.map((p) => [p, []]))
      // a reconnect storm: every project's first listener at once, and one that leaves again
      const gone = yield* Effect.fork(bus.listen("gone", () => undefined).pipe(Effect.map((remove) => remove())))
      yield* Effect.forEach(
        projects,
        (p) => bus.listen(p, (e) => void (e._tag === "Message" && seen.get(p)!.push(e.payload))),
        { concurrency: "unbounded" }
      )
      yield* gone.await
      // each live as soon as its listen returned: what is published now arrives
      yield* Effect.forEach(projects, (p) => bus.publish(p, `to ${p}`), { discard: true })
      yield* eventually(() => {
        for (const p of projects) expect(seen.get(p)).toEqual([`to ${p}`])
      })
      expect(yield* numsub(redis, `${prefix}project:gone`)).toBe(0)
      expect(yield* numsub(redis, `${prefix}project:p7`)).toBe(1)
    }))

  const proxied = Effect.gen(function*() {
    const target = new URL(redisUrl!)
    const proxy = yield* Effect.acquireRelease(
      Effect.promise(() => startTcpProxy(Number(target.port || 6379), target.hostname)),
      (p) => Effect.promise(() => p.close())
    )
    const prefix = uniquePrefix()
    return { proxy, prefix, bus: yield* redisBus(prefix, `redis://127.0.0.1:${proxy.port}`) }
  })

  it.scopedLive("outage: publish fails fast with BusUnavailable while Redis is unreachable", () =>
    Effect.gen(function*() {
      const { bus, proxy } = yield* proxied
      yield* bus.publish("a", "up")
      proxy.pause()
      for (let i = 0; i < 3; i++) {
        const [took, error] = yield* Effect.timed(Effect.flip(bus.publish("a", "down")))
        console.log(`outage: publish failed after ${Duration.toMillis(took).toFixed(0)} ms: ${error.message}`)
        expect(error).toBeInstanceOf(Bus.BusUnavailable)
        // fast: a bound for a slow machine too (TEST_TIME_FACTOR), far below a hanging publish
        expect(Duration.toMillis(took)).toBeLessThan(scaled(1_000))
      }
      // a pipelined batch: every message answers with the error, none is lost silently
      const outcomes = yield* bus.publishMany([{ projectId: "a", payload: "x" }, { projectId: "b", payload: "y" }])
      expect(outcomes.map((o) => o instanceof Bus.BusUnavailable)).toEqual([true, true])
    }))

  it.scopedLive("outage: after the connection comes back, subscribers get a Gap first and then later messages", () =>
    Effect.gen(function*() {
      const { bus, prefix, proxy } = yield* proxied
      const redis = yield* admin
      const a = yield* collect(yield* bus.subscribe("a"))
      const b = yield* collect(yield* bus.subscribe("b"))
      yield* bus.publish("a", "before")
      yield* eventually(() => expect(a).toEqual(["before"]))
      proxy.pause()
      yield* numsub(redis, `${prefix}project:a`).pipe(
        Effect.flatMap((n) => Effect.try(() => expect(n).toBe(0))),
        Effect.retry(Schedule.spaced("20 millis").pipe(Schedule.upTo("5 seconds")))
      )
      // published by another runner while this one is cut off: missed, which is what the Gap says
      yield* Effect.promise(() => redis.publish(`${prefix}project:a`, "missed"))
      const late = yield* collect(yield* bus.subscribe("a")) // joins during the outage
      proxy.resume()
      const cutAt = Date.now()
      yield* eventually(() => [a, b, late].forEach((seen) => expect(seen).toContain("<gap>")), "10 seconds")
      console.log(`outage: Gap delivered ${Date.now() - cutAt} ms after the proxy was restored`)
      expect(yield* numsub(redis, `${prefix}project:a`)).toBe(1)
      yield* bus.publish("a", "after").pipe(
        Effect.retry(Schedule.spaced("100 millis").pipe(Schedule.upTo("5 seconds")))
      )
      yield* bus.publish("b", "after b")
      yield* eventually(() => {
        expect(a).toEqual(["before", "<gap>", "after"])
        expect(late).toEqual(["<gap>", "after"])
        expect(b).toEqual(["<gap>", "after b"])
      })
    }))
})
