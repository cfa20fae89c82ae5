import { Duration } from "effect"
import * as S from "../config/Settings.js"

export const BreakerSettings = S.area(
  "Breaker",
  "the provider breaker: per provider and model, on 5xx, timeouts and connection errors (not 4xx or 429)",
  {
    errorRate: S.refine(
      S.positiveNumber("BREAKER_ERROR_RATE", "share of faulty calls in the window that opens the breaker (0–1]", 0.5),
      "must be at most 1",
      (n) => n <= 1
    ),
    minCalls: S.integer("BREAKER_MIN_CALLS", "calls the window must hold before its error rate can open it", 20, {
      min: 1
    }),
    window: S.refine(
      S.duration("BREAKER_WINDOW", "the sliding window the error rate is measured over (10 buckets)", "30 seconds"),
      "must be > 0",
      Duration.greaterThan(Duration.zero)
    ),
    openFor: S.refine(
      S.duration(
        "BREAKER_OPEN_FOR",
        "cool-down of an open breaker before it half-opens; doubles on each re-open",
        "30 seconds"
      ),
      "must be > 0",
      Duration.greaterThan(Duration.zero)
    ),
    openMax: S.duration("BREAKER_OPEN_MAX", "the longest cool-down, however often the breaker re-opens", "5 minutes"),
    probes: S.integer(
      "BREAKER_PROBES",
      "calls let through at once while half-open; as many successes close it, one fault re-opens it",
      3,
      { min: 1 }
    ),
    probeTimeout: S.duration(
      "BREAKER_PROBE_TIMEOUT",
      "a half-open round whose probes have not reported by then (a runner died mid-call) lets new probes through",
      "1 minute"
    ),
    redisTimeout: S.duration(
      "BREAKER_REDIS_TIMEOUT",
      "how long a Redis answer is awaited before this runner's local breaker decides",
      "1 second"
    )
  }
)
