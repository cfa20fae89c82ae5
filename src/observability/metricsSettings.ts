import { Option, Redacted } from "effect"
import * as S from "../config/Settings.js"

export const MetricsSettings = S.area(
  "Metrics",
  "Prometheus exposition at GET /metrics, and the gauges each runner samples from PostgreSQL",
  {
    token: S.refine(
      S.secret(
        "METRICS_TOKEN",
        "bearer token a scraper must send (Authorization: Bearer …) to read /metrics, at least 16 characters; unset: /metrics is open (keep the HTTP port internal)"
      ),
      "must be at least 16 characters",
      (t) => Option.isNone(t) || Redacted.value(t.value).length >= 16
    ),
    sampleInterval: S.duration(
      "METRICS_SAMPLE_INTERVAL",
      "how often each runner reads the backlog gauges (outbox, inbox dead and orphan rows, dead letters, review, unknown submits) from PostgreSQL",
      "15 seconds"
    )
  }
)
