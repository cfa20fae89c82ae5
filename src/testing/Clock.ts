import { Duration, Effect, Fiber, TestClock } from "effect"
import {
  firstPoll,
  nextPollAfterFailure,
  nextPollAfterSuccess,
  type PollFailure,
  type PollPolicy
} from "../domain/pollPolicy.js"
import type { TaskStatus } from "../schema/task.js"

/**
 * Clock control for tests run with `it.effect` (the TestClock): time moves only when the test moves it, so a
 * schedule, a sleep or a timeout happens exactly when the test says and never depends on how fast the machine is.
 */

/** Moves the test clock forward by `d`, running everything scheduled up to then. */
export const advance = (d: Duration.DurationInput) => TestClock.adjust(d)

/** The test clock's time, in milliseconds. */
export const now = TestClock.currentTimeMillis

/**
 * The poll policy with the seed's intervals (scale 1), a 30-minute expected maximum, 2 minutes of grace for a job
 * the provider does not know, and a 5-minute cap on error backoff; override any field.
 */
export const testPollPolicy = (overrides: Partial<PollPolicy> = {}): PollPolicy => ({
  scale: 1,
  expectedMax: Duration.minutes(30),
  notFoundGrace: Duration.minutes(2),
  errorCap: Duration.minutes(5),
  ...overrides
})

/** Moves the clock to the first poll after the provider accepted a job (`random` fixes the jitter, 0–1). */
export const advanceToFirstPoll = (policy: PollPolicy, random = 0.5) =>
  TestClock.adjust(Duration.millis(firstPoll(policy, random)))

/** Moves the clock to the next poll after a successful one for a task in `status`. */
export const advanceToNextPoll = (policy: PollPolicy, status: TaskStatus, options: {
  readonly overdue?: boolean
  readonly random?: number
} = {}) =>
  TestClock.adjust(
    Duration.millis(nextPollAfterSuccess(status, options.overdue ?? false, policy, options.random ?? 0.5))
  )

/** Moves the clock to the next try after the `failures`-th failed poll of this kind. */
export const advanceToRetry = (policy: PollPolicy, failure: PollFailure, failures: number, random = 0.5) =>
  TestClock.adjust(Duration.millis(nextPollAfterFailure(failure, failures, policy, random)))

/**
 * Runs `effect` in the background and moves the clock by `step` until it completes (at most `maxSteps` times):
 * for an effect that waits on schedules whose exact times the test does not care about.
 */
export const runWithClock = <A, E, R>(
  effect: Effect.Effect<A, E, R>,
  step: Duration.DurationInput,
  maxSteps = 1000
) =>
  Effect.gen(function*() {
    const fiber = yield* Effect.fork(effect)
    for (let i = 0; i < maxSteps; i++) {
      const done = yield* fiber.poll
      if (done._tag === "Some") break
      yield* TestClock.adjust(step)
    }
    return yield* Fiber.join(fiber)
  })
