import { Duration, Option } from "effect"
import type { TaskStatus } from "../schema/task.js"
import { backoffMillis } from "./backoff.js"

/**
 * When a task's poller looks at the provider next (seed 12.8.3): state-aware intervals with jitter, the
 * provider's Retry-After on 429, capped exponential backoff on 5xx and network errors, and a low frequency
 * once a job runs past its expected maximum duration. Every interval is multiplied by `scale` (tests and the
 * simulator use a small one).
 */
export interface PollPolicy {
  readonly scale: number
  /** Past this age a job is overdue: polled rarely, and reported once. */
  readonly expectedMax: Duration.Duration
  /** A provider that does not know a job it accepted gets this long before the task is reconciled. */
  readonly notFoundGrace: Duration.Duration
  readonly errorCap: Duration.Duration
}

/** How a failed provider call was classified (ProviderCallFailed carries it). */
export interface PollFailure {
  readonly kind: "rate_limited" | "server" | "network" | "not_found" | "auth" | "malformed"
  readonly retryAfter: Option.Option<Duration.Duration>
}

const between = (loSeconds: number, hiSeconds: number, random: number) =>
  (loSeconds + (hiSeconds - loSeconds) * random) * 1000

/** Milliseconds until the next poll after a successful one, by what the task is doing. */
export const nextPollAfterSuccess = (
  status: TaskStatus,
  overdue: boolean,
  policy: PollPolicy,
  random: number = Math.random()
): number => {
  if (overdue) return between(60, 120, random) * policy.scale
  switch (status) {
    case "submitted":
      return between(10, 30, random) * policy.scale
    default:
      return between(5, 15, random) * policy.scale
  }
}

/** Milliseconds until the first poll after the provider accepted a job. */
export const firstPoll = (policy: PollPolicy, random: number = Math.random()): number =>
  between(2, 5, random) * policy.scale

/** Milliseconds until the next try after a failed query, by error class (seed 12.8.4). */
export const nextPollAfterFailure = (
  error: PollFailure,
  failures: number,
  policy: PollPolicy,
  random: number = Math.random()
): number => {
  const exponential = backoffMillis(
    failures,
    { baseMs: 1000 * policy.scale, capMs: Duration.toMillis(policy.errorCap) },
    random
  )
  switch (error.kind) {
    case "rate_limited":
      return Option.match(error.retryAfter, {
        onNone: () => exponential,
        onSome: (d) => Duration.toMillis(d) + between(0, 1, random) * policy.scale
      })
    case "auth":
      // the credential's breaker is open: nothing useful can happen before it half-opens
      return between(60, 90, random) * policy.scale
    case "not_found":
      return between(5, 15, random) * policy.scale
    default:
      return exponential
  }
}
