import { expect, it } from "@effect/vitest"
import {
  ConfigProvider,
  Context,
  Duration,
  Effect,
  Layer,
  Logger,
  LogLevel,
  Queue,
  Schedule,
  Scope,
  Stream,
  TestClock
} from "effect"
import { type BusEvent, NotificationBus } from "../../src/bus/NotificationBus.js"
import { scaledDuration } from "./env.js"

/** The tests both notification buses must pass: in process (unit tier) and on Redis (integration tier). */

export const BUFFER = 16

export const buildBus = (layer: Layer.Layer<NotificationBus>) =>
  Layer.build(
    layer.pipe(
      Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["BUS_SUBSCRIBER_BUFFER", `${BUFFER}`]])))),
      Layer.provide(Logger.minimumLogLevel(LogLevel.Warning))
    )
  ).pipe(Effect.map((ctx) => Context.get(ctx, NotificationBus)))

/** Everything a subscriber receives, as payloads and "<gap>", read by a fiber of the test's scope. */
export const collect = (queue: Queue.Dequeue<BusEvent>) =>
  Effect.gen(function*() {
    const seen: Array<string> = []
    yield* Stream.runForEach(Stream.fromQueue(queue), (e) =>
      Effect.sync(() => seen.push(e._tag === "Gap" ? "<gap>" : e.payload))).pipe(
        Effect.forkScoped
      )
    return seen
  })

/** Retries an assertion until it holds (or the last failure after `within`): a real bus delivers in its own time. */
export const eventually = (check: () => void, within: Duration.DurationInput = "5 seconds") =>
  Effect.try(check).pipe(Effect.retry(Schedule.spaced("20 millis").pipe(Schedule.upTo(scaledDuration(within)))))

/**
 * Retries an assertion, yielding to the other fibers between tries and never sleeping: the in-process bus delivers
 * as soon as its readers run, with no time passing on the test clock.
 */
export const settled = (check: () => void) =>
  Effect.try(check).pipe(Effect.tapError(() => Effect.yieldNow()), Effect.retry({ times: 10_000 }))

export const range = (n: number, from = 0) => Array.from({ length: n }, (_, i) => `m${from + i}`)

type Buses = Effect.Effect<readonly [NotificationBus["Type"], NotificationBus["Type"]], never, Scope.Scope>

/**
 * `buses` gives a publishing and a subscribing bus (one process or two). In memory the tests run on the TestClock and
 * assert that delivery takes no time at all; on Redis they run on the live clock and wait for each delivery.
 */
export const sharedBusTests = (buses: Buses, mode: "memory" | "redis") => {
  const test = mode === "memory" ? it.scoped : it.scopedLive
  const until = mode === "memory" ? settled : eventually

  test("publish: every subscriber of the project receives it, another project's subscriber does not", () =>
    Effect.gen(function*() {
      const [publisher, subscriber] = yield* buses
      const a1 = yield* collect(yield* subscriber.subscribe("a"))
      const a2 = yield* collect(yield* subscriber.subscribe("a"))
      const a3 = yield* collect(yield* publisher.subscribe("a"))
      const b = yield* collect(yield* subscriber.subscribe("b"))
      yield* publisher.publish("a", "x")
      yield* publisher.publish("a", "y")
      yield* publisher.publish("c", "nobody listens")
      yield* until(() => [a1, a2, a3].forEach((seen) => expect(seen).toEqual(["x", "y"])))
      yield* publisher.publish("b", "z")
      yield* until(() => expect(b).toEqual(["z"]))
      expect(a1).toEqual(["x", "y"])
    }))

  test("publishMany: one batch reaches each project's subscribers in order, and answers per message", () =>
    Effect.gen(function*() {
      const [publisher, subscriber] = yield* buses
      const a = yield* collect(yield* subscriber.subscribe("a"))
      const b = yield* collect(yield* subscriber.subscribe("b"))
      const outcomes = yield* publisher.publishMany(
        ["a:1", "b:1", "a:2", "c:1", "a:3"].map((m) => ({ projectId: m.split(":")[0]!, payload: m }))
      )
      expect(outcomes).toEqual([undefined, undefined, undefined, undefined, undefined])
      yield* until(() => {
        expect(a).toEqual(["a:1", "a:2", "a:3"])
        expect(b).toEqual(["b:1"])
      })
    }))

  test("overflow: a subscriber that never reads gets a Gap, another still receives everything at once", () =>
    Effect.gen(function*() {
      const [publisher, subscriber] = yield* buses
      const slow = yield* subscriber.subscribe("a")
      const fast = yield* collect(yield* subscriber.subscribe("a"))
      const started = Date.now()
      const clockAtStart = mode === "memory" ? yield* TestClock.currentTimeMillis : 0
      // one at a time, like commits: a burst published without yielding would overflow the reader's buffer too
      yield* Effect.forEach(range(100), (m) => Effect.zipRight(publisher.publish("a", m), Effect.yieldNow()), {
        discard: true
      })
      yield* until(() => expect(fast).toEqual(range(100)))
      if (mode === "memory") {
        // "at once": the reader got all 100 while the other never read, and no time had to pass for it
        expect(yield* TestClock.currentTimeMillis).toBe(clockAtStart)
      } else {
        // how fast depends on the machine: reported, not asserted
        console.log(`overflow: 100 messages reached the reading subscriber in ${Date.now() - started} ms`)
      }
      // the buffer's messages, one Gap for the 84 dropped, and then it gets messages again
      const slowSeen = yield* collect(slow)
      yield* until(() => expect(slowSeen).toEqual([...range(BUFFER), "<gap>"]))
      yield* publisher.publish("a", "after")
      yield* until(() => expect(slowSeen).toEqual([...range(BUFFER), "<gap>", "after"]))
    }))
}
