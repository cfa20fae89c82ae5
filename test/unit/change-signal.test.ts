import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Fiber, TestClock } from "effect"
import { makeChangeSignal } from "../../src/entities/changeSignal.js"

describe("a task entity's change signal", () => {
  it.effect("on the TestClock: a wait ends at its time, or at a change; a change nobody waited for is kept", () =>
    Effect.gen(function*() {
      const signal = makeChangeSignal()
      const timed = yield* Effect.fork(signal.wait(1_000))
      yield* TestClock.adjust(Duration.millis(999))
      expect(timed.unsafePoll()).toBeNull()
      yield* TestClock.adjust(Duration.millis(1))
      yield* Fiber.join(timed)
      const woken = yield* Effect.fork(signal.wait(60_000))
      yield* TestClock.adjust(Duration.millis(10))
      signal.notify()
      yield* Fiber.join(woken)
      // nobody waits: the change is kept, once
      signal.notify()
      expect(signal.take()).toBe(true)
      expect(signal.take()).toBe(false)
      signal.notify()
      yield* signal.wait(60_000)
    }))

  it.live("on the live clock (a timer, no fiber): woken by a change, else after its time", () =>
    Effect.gen(function*() {
      const signal = makeChangeSignal()
      // the waiter registers as soon as its fiber runs: a yield, no wall-clock sleep (a change before it is kept)
      const woken = yield* Effect.fork(signal.wait(60_000))
      yield* Effect.yieldNow()
      signal.notify()
      yield* Fiber.join(woken)
      yield* signal.wait(10)
      const interrupted = yield* Effect.fork(signal.wait(60_000))
      yield* Effect.yieldNow()
      yield* Fiber.interrupt(interrupted)
      // the interrupted wait left no waiter behind: the next change is kept
      signal.notify()
      expect(signal.take()).toBe(true)
    }))
})
