import { describe, expect, it } from "@effect/vitest"
import { Cause, Deferred, Duration, Effect, Either, Exit, Fiber, Supervisor, TestClock } from "effect"
import { awaitWithin, promiseWithin } from "../../src/runtime/timers.js"

const never = () => new Promise<number>(() => {})
const options = (timeout: Duration.DurationInput) => ({
  timeout: Duration.decode(timeout),
  onError: (e: unknown) => `error: ${String(e)}`,
  onTimeout: () => "timed out"
})

/** Counts the fibers started under it. */
class ForkCount extends Supervisor.AbstractSupervisor<number> {
  started = 0
  get value() {
    return Effect.sync(() => this.started)
  }
  override onStart() {
    this.started++
  }
}

describe("hot-path timeouts as Node timers (src/runtime/timers.ts)", () => {
  it.live("promiseWithin, on the live clock: the promise's value, its rejection, a throw, or the timeout", () =>
    Effect.gen(function*() {
      expect(yield* promiseWithin(() => Promise.resolve(7), options("1 minute"))).toBe(7)
      const rejected = yield* Effect.either(promiseWithin(() => Promise.reject(new Error("no")), options("1 minute")))
      expect(rejected).toEqual(Either.left("error: Error: no"))
      const thrown = yield* Effect.either(promiseWithin(() => {
        throw new Error("sync")
      }, options("1 minute")))
      expect(thrown).toEqual(Either.left("error: Error: sync"))
      const silent = yield* Effect.either(promiseWithin(never, options("10 millis")))
      expect(silent).toEqual(Either.left("timed out"))
    }))

  it.live("promiseWithin, on the live clock: a settle after the timeout, or after an interruption, is dropped", () =>
    Effect.gen(function*() {
      let resolve = (_: number) => {}
      const late = new Promise<number>((r) => (resolve = r))
      expect(yield* Effect.either(promiseWithin(() => late, options("10 millis")))).toEqual(Either.left("timed out"))
      resolve(1)
      let settleLater = (_: number) => {}
      const waiting = yield* Effect.fork(promiseWithin(
        () => new Promise<number>((r) => (settleLater = r)),
        options("1 minute")
      ))
      yield* Effect.yieldNow()
      yield* Fiber.interrupt(waiting)
      settleLater(2)
      expect(Exit.isInterrupted(yield* Fiber.await(waiting))).toBe(true)
    }))

  it.effect("promiseWithin, on the TestClock: the timeout is that clock's", () =>
    Effect.gen(function*() {
      const waiting = yield* Effect.fork(Effect.either(promiseWithin(never, options("5 seconds"))))
      yield* TestClock.adjust(Duration.millis(4_999))
      expect(waiting.unsafePoll()).toBeNull()
      yield* TestClock.adjust(Duration.millis(1))
      expect(yield* Fiber.join(waiting)).toEqual(Either.left("timed out"))
    }))

  it.live("awaitWithin, on the live clock: the fiber's value or failure, or a TimeoutException while it runs on", () =>
    Effect.gen(function*() {
      const done = yield* Effect.forkDaemon(Effect.succeed(3))
      expect(yield* awaitWithin(done, Duration.minutes(1))).toBe(3)
      const failed = yield* Effect.forkDaemon(Effect.fail("bad"))
      expect(yield* Effect.either(awaitWithin(failed, Duration.minutes(1)))).toEqual(Either.left("bad"))
      const gate = yield* Deferred.make<number>()
      const slow = yield* Effect.forkDaemon(Deferred.await(gate))
      const timedOut = yield* Effect.either(awaitWithin(slow, Duration.millis(10)))
      expect(Either.isLeft(timedOut) && Cause.isTimeoutException(timedOut.left)).toBe(true)
      // the fiber was not interrupted by the timeout: it ends when it is let go
      yield* Deferred.succeed(gate, 4)
      expect(yield* Fiber.join(slow)).toBe(4)
    }))

  it.effect("awaitWithin, on the TestClock: the timeout is that clock's", () =>
    Effect.gen(function*() {
      const gate = yield* Deferred.make<number>()
      const slow = yield* Effect.forkDaemon(Deferred.await(gate))
      const waiting = yield* Effect.fork(Effect.either(awaitWithin(slow, Duration.seconds(2))))
      yield* TestClock.adjust(Duration.millis(1_999))
      expect(waiting.unsafePoll()).toBeNull()
      yield* TestClock.adjust(Duration.millis(1))
      const outcome = yield* Fiber.join(waiting)
      expect(Either.isLeft(outcome) && Cause.isTimeoutException(outcome.left)).toBe(true)
    }))

  it.live("on the live clock neither forks a fiber (Effect.timeout, the control, does)", () =>
    Effect.gen(function*() {
      const control = new ForkCount()
      yield* Effect.tryPromise(() => Promise.resolve(1)).pipe(Effect.timeout("1 minute"), Effect.supervised(control))
      expect(yield* control.value).toBeGreaterThan(0)
      const ours = new ForkCount()
      yield* promiseWithin(() => Promise.resolve(1), options("1 minute")).pipe(Effect.supervised(ours))
      const done = yield* Effect.forkDaemon(Effect.succeed(2))
      yield* awaitWithin(done, Duration.minutes(1)).pipe(Effect.supervised(ours))
      expect(yield* ours.value).toBe(0)
    }))
})
