import { Config, Duration, Option } from "effect"
import type { ProviderCallFailed } from "../providers/ProviderClients.js"
import type { TaskStatus } from "../schema/task.js"

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

export const PollPolicyConfig: Config.Config<PollPolicy> = Config.all({
  scale: Config.number("POLL_INTERVAL_SCALE").pipe(Config.withDefault(1)),
  expectedMax: Config.duration("TASK_EXPECTED_MAX_DURATION").pipe(Config.withDefault(Duration.minutes(30))),
  notFoundGrace: Config.duration("POLL_NOT_FOUND_GRACE").pipe(Config.withDefault(Duration.minutes(2))),
  errorCap: Config.duration("POLL_ERROR_BACKOFF_CAP").pipe(Config.withDefault(Duration.minutes(5)))
})

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
  error: ProviderCallFailed,
  failures: number,
  policy: PollPolicy,
  random: number = Math.random()
): number => {
  const exponential = Math.min(
    Duration.toMillis(policy.errorCap),
    2 ** Math.min(failures, 20) * 1000 * policy.scale
  ) * (0.5 + random / 2)
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
