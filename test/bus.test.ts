import { describe, expect, it } from "@effect/vitest"
import {
  ConfigProvider,
  Context,
  Duration,
  Effect,
  Exit,
  Layer,
  Logger,
  LogLevel,
  Queue,
  Schedule,
  Scope,
  Stream
} from "effect"
import { Redis as IORedis } from "ioredis"
import { type BusEvent, NotificationBus } from "../src/bus/NotificationBus.js"
import * as Bus from "../src/bus/NotificationBus.js"
import * as Redis from "../src/redis/Redis.js"
import { startTcpProxy } from "./support/tcpProxy.js"

/** Like DATABASE_URL: without REDIS_URL the Redis tests are skipped locally, and must not be in CI. */
const redisUrl = process.env.REDIS_URL
if (redisUrl === undefined && process.env.CI === "true") {
  throw new Error("CI=true but REDIS_URL is unset: Redis tests must not be skipped in CI")
}

const BUFFER = 16

/** A key prefix of its own per test, so that channels of parallel runs never meet. */
const uniquePrefix = () => `test:${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}:`

const build = (layer: Layer.Layer<NotificationBus>) =>
  Layer.build(
    layer.pipe(
      Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["BUS_SUBSCRIBER_BUFFER", `${BUFFER}`]])))),
      Layer.provide(Logger.minimumLogLevel(LogLevel.Warning))
    )
  ).pipe(Effect.map((ctx) => Context.get(ctx, NotificationBus)))

/** One runner's bus with its own Redis connections. */
const redisBus = (prefix: string, url = redisUrl!) =>
  build(Bus.layerRedis.pipe(Layer.provide(Redis.layer(url, prefix))))

/** A connection of the test's own, to look at the server's subscriptions. */
const admin = Effect.acquireRelease(Effect.sync(() => new IORedis(redisUrl!)), (c) => Effect.promise(() => c.quit()))
const numsub = (redis: IORedis, channel: string) =>
  Effect.promise(() => redis.pubsub("NUMSUB", channel) as Promise<[string, number]>).pipe(Effect.map(([, n]) => n))

/** Everything a subscriber receives, as payloads and "<gap>", read by a fiber of the test's scope. */
const collect = (queue: Queue.Dequeue<BusEvent>) =>
  Effect.gen(function*() {
    const seen: Array<string> = []
    yield* Stream.runForEach(Stream.fromQueue(queue), (e) =>
      Effect.sync(() => seen.push(e._tag === "Gap" ? "<gap>" : e.payload))).pipe(
        Effect.forkScoped
      )
    return seen
  })

/** Retries an assertion until it holds (or the last failure after `within`). */
const eventually = (check: () => void, within: Duration.DurationInput = "5 seconds") =>
  Effect.try(check).pipe(Effect.retry(Schedule.spaced("20 millis").pipe(Schedule.upTo(within))))

const range = (n: number, from = 0) => Array.from({ length: n }, (_, i) => `m${from + i}`)

/** The tests both buses must pass: `buses` gives a publishing and a subscribing bus (one process or two). */
const sharedTests = (
  buses: Effect.Effect<readonly [NotificationBus["Type"], NotificationBus["Type"]], never, Scope.Scope>
) => {
  it.scopedLive("publish: every subscriber of the project receives it, another project's subscriber does not", () =>
    Effect.gen(function*() {
      const [publisher, subscriber] = yield* buses
      const a1 = yield* collect(yield* subscriber.subscribe("a"))
      const a2 = yield* collect(yield* subscriber.subscribe("a"))
      const a3 = yield* collect(yield* publisher.subscribe("a"))
      const b = yield* collect(yield* subscriber.subscribe("b"))
      yield* publisher.publish("a", "x")
      yield* publisher.publish("a", "y")
      yield* publisher.publish("c", "nobody listens")
      yield* eventually(() => [a1, a2, a3].forEach((seen) => expect(seen).toEqual(["x", "y"])))
      yield* publisher.publish("b", "z")
      yield* eventually(() => expect(b).toEqual(["z"]))
      expect(a1).toEqual(["x", "y"])
    }))

  it.scopedLive("overflow: a subscriber that never reads gets a Gap, another still receives everything at once", () =>
    Effect.gen(function*() {
      const [publisher, subscriber] = yield* buses
      const slow = yield* subscriber.subscribe("a")
      const fast = yield* collect(yield* subscriber.subscribe("a"))
      const started = Date.now()
      // one at a time, like commits: a burst published without yielding would overflow the reader's buffer too
      yield* Effect.forEach(range(100), (m) => Effect.zipRight(publisher.publish("a", m), Effect.yieldNow()), {
        discard: true
      })
      yield* eventually(() => expect(fast).toEqual(range(100)))
      const elapsed = Date.now() - started
      console.log(`overflow: 100 messages reached the reading subscriber in ${elapsed} ms`)
      expect(elapsed).toBeLessThan(1_000)
      // the buffer's messages, one Gap for the 84 dropped, and then it gets messages again
      const slowSeen = yield* collect(slow)
      yield* eventually(() => expect(slowSeen).toEqual([...range(BUFFER), "<gap>"]))
      yield* publisher.publish("a", "after")
      yield* eventually(() => expect(slowSeen).toEqual([...range(BUFFER), "<gap>", "after"]))
    }))
}

describe("NotificationBus (memory)", () => {
  sharedTests(build(Bus.layerMemory).pipe(Effect.map((bus) => [bus, bus] as const)))
})

describe.skipIf(redisUrl === undefined)("NotificationBus (Redis)", () => {
  sharedTests(
    Effect.suspend(() => {
      const prefix = uniquePrefix()
      return Effect.all([redisBus(prefix), redisBus(prefix)])
    })
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
        expect(Duration.toMillis(took)).toBeLessThan(1_000)
      }
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
