import { SqlClient } from "@effect/sql"
import { Effect, Layer, Metric } from "effect"
import {
  inboxRows,
  notificationDeadLetters,
  outboxBacklog,
  outboxOldestAgeSeconds,
  pollFallbackRatio,
  reconciliationsOpen,
  samplerFailures,
  tasksManualReview,
  tasksSubmitUnknown
} from "../observability/metrics.js"
import { MetricsSettings } from "../observability/metricsSettings.js"
import { runPeriodically } from "./PeriodicLoop.js"

/** Counts (int8: numbers, Database.ts) and one age (numeric: text), null when there is no row to measure. */
type Sample = Record<
  | "outbox_backlog"
  | "outbox_oldest_age"
  | "inbox_pending"
  | "inbox_retry"
  | "inbox_orphan"
  | "inbox_dead"
  | "dead_letters"
  | "manual_review"
  | "submit_unknown"
  | "reconciliations"
  | "poll_changes"
  | "callback_changes",
  number | string | null
>

const inbox = (status: string) => Metric.tagged(inboxRows, "status", status)

/**
 * The gauges that are facts of PostgreSQL rather than of this process: backlogs and queues an operator acts on
 * (seed 12.11.6, 19.7.8). Every runner samples them every METRICS_SAMPLE_INTERVAL, so a scrape of any runner shows
 * them and none depends on which runner holds a singleton; the values are cluster-wide (aggregate with max). One
 * statement, each count on a partial index (dead inbox rows: migrations/0011).
 */
export const MetricsSamplerLive = Layer.scopedDiscard(Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const { sampleInterval } = yield* MetricsSettings.config

  const sample = Effect.gen(function*() {
    const [row] = yield* sql<Sample>`
      SELECT
        (SELECT count(*) FROM outbox_events WHERE published_at IS NULL) AS outbox_backlog,
        (SELECT extract(epoch FROM now() - min(created_at)) FROM outbox_events WHERE published_at IS NULL)
          AS outbox_oldest_age,
        i.pending AS inbox_pending, i.retry AS inbox_retry, i.orphan AS inbox_orphan,
        (SELECT count(*) FROM provider_callback_inbox WHERE process_status = 'dead') AS inbox_dead,
        (SELECT count(*) FROM notification_dead_letters WHERE replayed_at IS NULL) AS dead_letters,
        (SELECT count(*) FROM generation_tasks WHERE terminal_at IS NULL AND status = 'manual_review')
          AS manual_review,
        (SELECT count(*) FROM task_attempts WHERE submit_state = 'SUBMIT_UNKNOWN') AS submit_unknown,
        (SELECT count(*) FROM task_reconciliations WHERE resolved_at IS NULL) AS reconciliations,
        e.poll AS poll_changes, e.webhook AS callback_changes
      FROM (
        SELECT count(*) FILTER (WHERE process_status = 'pending') AS pending,
          count(*) FILTER (WHERE process_status = 'retry') AS retry,
          count(*) FILTER (WHERE process_status = 'orphan') AS orphan
        FROM provider_callback_inbox WHERE process_status IN ('pending', 'retry', 'orphan')
      ) i, (
        SELECT count(*) FILTER (WHERE source = 'poll') AS poll, count(*) FILTER (WHERE source = 'webhook') AS webhook
        FROM task_events WHERE created_at > now() - interval '5 minutes' AND source IN ('poll', 'webhook')
      ) e`
    if (row === undefined) return
    const n = (value: number | string | null) => (value === null ? 0 : Number(value))
    const polls = n(row.poll_changes)
    const callbacks = n(row.callback_changes)
    yield* Effect.all([
      Metric.set(outboxBacklog, n(row.outbox_backlog)),
      Metric.set(outboxOldestAgeSeconds, n(row.outbox_oldest_age)),
      Metric.set(inbox("pending"), n(row.inbox_pending)),
      Metric.set(inbox("retry"), n(row.inbox_retry)),
      Metric.set(inbox("orphan"), n(row.inbox_orphan)),
      Metric.set(inbox("dead"), n(row.inbox_dead)),
      Metric.set(notificationDeadLetters, n(row.dead_letters)),
      Metric.set(tasksManualReview, n(row.manual_review)),
      Metric.set(tasksSubmitUnknown, n(row.submit_unknown)),
      Metric.set(reconciliationsOpen, n(row.reconciliations)),
      // no provider-driven change in the window: nothing fell back to polling
      Metric.set(pollFallbackRatio, polls + callbacks === 0 ? 0 : polls / (polls + callbacks))
    ], { discard: true })
  }).pipe(Effect.tapErrorCause(() => Metric.increment(samplerFailures)))

  yield* runPeriodically({ interval: sampleInterval, failure: "metrics sampler failed", checks: [sample] }).pipe(
    Effect.forkScoped
  )
}))
