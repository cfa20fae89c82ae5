/**
 * Retries on the hot paths. `Effect.retry` builds its driver (the schedule's state, the iteration metadata it adds to
 * the context: a copy of the whole context) before the first try, and every message to a task entity went through
 * one: ~0.11 ms of CPU per message on this machine (a one-off script: GetSnapshot to 200 built entities, 27 passes,
 * through TaskClient.send against the entity client alone: 0.385 and 0.374 against 0.266 and 0.268 ms, medians of two
 * runs; with this, 0.300 and 0.320 against 0.291 and 0.319), an eighth of a transition.
 */
import { Effect, type Schedule } from "effect"

/**
 * `Effect.retry(self, options)` whose driver is built only once `self` failed with an error `while` accepts: the first
 * try runs bare, in its caller's context. The retry then starts from that failure, as if it had run from the start:
 * the schedule's first delay, then `self` again.
 */
export const retryAfterFailure = <A, E, R, Out, R2>(
  self: Effect.Effect<A, E, R>,
  options: { readonly while: (error: E) => boolean; readonly schedule: Schedule.Schedule<Out, E, R2> }
): Effect.Effect<A, E, R | R2> =>
  Effect.catchIf(self, options.while, (first) => {
    let failedOnce = false
    const again = Effect.suspend(() => failedOnce ? self : ((failedOnce = true), Effect.fail(first)))
    return Effect.retry(again, options)
  })
