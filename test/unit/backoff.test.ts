import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Fiber, TestClock } from "effect"
import * as fc from "fast-check"
import { backoff, backoffMillis, backoffSchedule } from "../../src/domain/backoff.js"

describe("the one backoff: capped exponential, full jitter", () => {
  const policy = { baseMs: 100, capMs: 5000 }

  it.prop(
    "every wait is inside [0, min(cap, base·2ⁿ)]",
    [fc.nat(100), fc.double({ min: 0, max: 1, noNaN: true })],
    ([n, r]) => {
      const wait = backoffMillis(n, policy, r)
      expect(wait).toBeGreaterThanOrEqual(0)
      expect(wait).toBeLessThanOrEqual(Math.min(5000, 100 * 2 ** n))
    }
  )

  it("the window doubles until the cap; the draw spans all of it", () => {
    expect([0, 1, 2, 3, 6, 50].map((n) => backoffMillis(n, policy, 1))).toEqual([100, 200, 400, 800, 5000, 5000])
    expect(backoffMillis(7, policy, 0)).toBe(0)
    expect(Duration.toMillis(backoff(2, { base: Duration.millis(100), cap: Duration.seconds(5) }, 0.5))).toBe(200)
  })

  it.effect("as a Schedule, retries wait on the clock (TestClock), never longer than the cap", () =>
    Effect.gen(function*() {
      let tries = 0
      const fiber = yield* Effect.sync(() => ++tries).pipe(
        Effect.flatMap((n) => (n < 6 ? Effect.fail("not yet") : Effect.succeed(n))),
        Effect.retry(backoffSchedule({ base: Duration.millis(100), cap: Duration.millis(400) })),
        Effect.fork
      )
      yield* TestClock.adjust(Duration.millis(0))
      expect(tries).toBe(1)
      // five retries, each at most 400 ms away: 2 s of clock is always enough, whatever the draws
      for (let i = 0; i < 20; i++) yield* TestClock.adjust(Duration.millis(100))
      expect(yield* Fiber.join(fiber)).toBe(6)
    }))
})
