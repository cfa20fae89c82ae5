import { Duration, Schedule } from "effect"

/**
 * The one backoff: capped exponential with full jitter ("Exponential Backoff and Jitter", AWS Architecture Blog).
 * Try n waits a uniform draw in [0, min(cap, base · 2ⁿ)]. Full jitter spreads a crowd of retries (a reconnect storm
 * after an outage, every poller after a provider's 5xx burst) over the whole window instead of moving the crowd
 * along together; it also keeps the expected wait at half the ceiling. Pure: the browser client uses
 * `backoffMillis` too (numbers only, so its bundle takes nothing of Effect).
 */
export interface Backoff {
  readonly base: Duration.Duration
  readonly cap: Duration.Duration
}

/** Milliseconds to wait before retry number `attempt` (0 is the first retry); base and cap in milliseconds. */
export const backoffMillis = (
  attempt: number,
  policy: { readonly baseMs: number; readonly capMs: number },
  random: number = Math.random()
): number => random * Math.min(policy.capMs, policy.baseMs * 2 ** Math.min(Math.max(attempt, 0), 52))

export const backoff = (attempt: number, policy: Backoff, random?: number): Duration.Duration =>
  Duration.millis(backoffMillis(attempt, millisOf(policy), random))

const millisOf = (policy: Backoff) => ({ baseMs: Duration.toMillis(policy.base), capMs: Duration.toMillis(policy.cap) })

/** The same backoff as a Schedule (for `Effect.retry` / `Effect.repeat`): forever, unless the caller bounds it. */
export const backoffSchedule = (policy: Backoff): Schedule.Schedule<number> =>
  Schedule.forever.pipe(Schedule.addDelay((n) => backoff(n, policy)))
