import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Either, Fiber, Schedule, TestClock } from "effect"
import { retryAfterFailure } from "../../src/runtime/retry.js"

/** An effect that fails with "busy" `failures` times, then succeeds with the number of tries; its tries and contexts. */
const flaky = (failures: number) => {
  const seen = { tries: 0, contexts: [] as Array<Context.Context<never>> }
  const effect = Effect.gen(function*() {
    seen.contexts.push(yield* Effect.context<never>())
    seen.tries++
    return seen.tries <= failures ? yield* Effect.fail("busy" as const) : seen.tries
  })
  return { effect, seen }
}

describe("retries built only after a failure (src/runtime/retry.ts)", () => {
  it.effect("a first try that succeeds runs once, in its caller's own context: no retry driver around it", () =>
    Effect.gen(function*() {
      const { effect, seen } = flaky(0)
      const caller = yield* Effect.context<never>()
      const result = yield* retryAfterFailure(effect, { while: () => true, schedule: Schedule.spaced("1 second") })
      expect(result).toBe(1)
      expect(seen.tries).toBe(1)
      // Effect.retry runs even a first try with its iteration metadata added: a copy of the context
      expect(seen.contexts[0]).toBe(caller)
      const control = flaky(0)
      yield* Effect.retry(control.effect, { while: () => true, schedule: Schedule.spaced("1 second") })
      expect(control.seen.contexts[0]).not.toBe(caller)
    }))

  it.effect("after a failure: the schedule's delays, then the tries again, as Effect.retry", () =>
    Effect.gen(function*() {
      const { effect, seen } = flaky(2)
      const fiber = yield* Effect.fork(
        retryAfterFailure(effect, { while: (e) => e === "busy", schedule: Schedule.spaced("1 second") })
      )
      yield* Effect.yieldNow()
      expect(seen.tries).toBe(1)
      yield* TestClock.adjust("999 millis")
      expect(seen.tries).toBe(1)
      yield* TestClock.adjust("1 millis")
      expect(seen.tries).toBe(2)
      yield* TestClock.adjust("1 second")
      expect(yield* Fiber.join(fiber)).toBe(3)
    }))

  it.effect("an error `while` refuses is not retried; a schedule that ends gives the last error", () =>
    Effect.gen(function*() {
      const refused = flaky(5)
      const once = yield* Effect.either(
        retryAfterFailure(refused.effect, { while: () => false, schedule: Schedule.spaced("1 second") })
      )
      expect(once).toEqual(Either.left("busy"))
      expect(refused.seen.tries).toBe(1)
      const bounded = flaky(5)
      const fiber = yield* Effect.fork(
        retryAfterFailure(bounded.effect, { while: () => true, schedule: Schedule.recurs(2) })
      )
      yield* TestClock.adjust("1 second")
      expect(yield* Effect.either(Fiber.join(fiber))).toEqual(Either.left("busy"))
      // the first try and two retries, as Effect.retry with Schedule.recurs(2)
      expect(bounded.seen.tries).toBe(3)
    }))
})
