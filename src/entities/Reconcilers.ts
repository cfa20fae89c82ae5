import { Singleton } from "@effect/cluster"
import { SqlClient } from "@effect/sql"
import { Duration, Effect } from "effect"
import * as S from "../config/Settings.js"
import { INBOX_CHANNEL } from "../persistence/channels.js"
import { runPeriodically } from "../persistence/PeriodicLoop.js"
import { TaskClient } from "./TaskClient.js"
import { LifecycleSettings } from "./TaskLifecycle.js"
import { wakeTasks } from "./wakeTasks.js"

/** Unknown submits woken per round; the next round takes the next page. */
const UNKNOWN_PAGE = 500

export const ReconcilerSettings = S.area("Reconcilers", "re-driving facts that should have moved and did not", {
  interval: S.duration("RECONCILE_INTERVAL", "how often the reconcilers run", "30 seconds"),
  outputMargin: S.duration(
    "OUTPUT_DEADLINE_MARGIN",
    "outputs whose provider URL expires within this are re-driven (and warned about) before they are lost",
    "10 minutes"
  )
})

/**
 * A cluster singleton running the reconcilers of seed 12.8.6 every RECONCILE_INTERVAL. Each finds facts that
 * should have moved and did not, and re-drives them through the normal path (a wake, an inbox retry) or writes
 * the missing fact idempotently; none has rules of its own.
 */
export const ReconcilersLive = Singleton.make(
  "TaskReconcilers",
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const tasks = yield* TaskClient
    const { interval, outputMargin } = yield* ReconcilerSettings.config
    // the lifecycle's own settings, so the reconcilers act exactly where the lifecycle stops waiting
    const { policy: { expectedMax }, submitUnknownGrace: unknownAfter } = yield* LifecycleSettings.config
    const secs = (d: Duration.Duration) => Duration.toSeconds(d)

    /** Inbox rows nobody drained for 5 minutes get a wake-up; orphans whose attempt is now known retry at once. */
    const stuckInbox = Effect.gen(function*() {
      const adopted = yield* sql<{ id: number }>`
        UPDATE provider_callback_inbox i SET process_status = 'retry', next_retry_at = now()
        FROM task_attempts a
        WHERE i.process_status = 'orphan' AND a.provider = i.provider
          AND (a.provider_task_id = i.provider_task_id OR a.client_request_id = i.client_request_id)
        RETURNING i.id`
      const [stuck] = yield* sql<{ n: number }>`
        SELECT count(*)::int AS n FROM provider_callback_inbox
        WHERE process_status IN ('pending', 'retry') AND next_retry_at < now() - interval '5 minutes'`
      if (stuck!.n > 0 || adopted.length > 0) {
        yield* Effect.logWarning("inbox rows waiting too long: waking the processors")
          .pipe(Effect.annotateLogs({ stuck: stuck!.n, adopted_orphans: adopted.length }))
        yield* sql`SELECT pg_notify(${INBOX_CHANNEL}, '')`
      }
    })

    /**
     * Submissions whose outcome is still unknown: their entity resolves them (lookup, callback, or a human). A
     * keyset cursor pages through the backlog, UNKNOWN_PAGE tasks a round, and starts over after the last page: the
     * oldest page alone was read every round before, so 500 stuck tasks hid every newer one. Tasks in manual_review
     * wait for a human (the entity does nothing on a wake), so they are not woken at all.
     */
    let after: { since: Date; taskId: string } | null = null
    const unknownSubmits = Effect.gen(function*() {
      const from = after
      const rows = yield* sql<{ task_id: string; since: Date }>`
        SELECT a.task_id, COALESCE(a.unknown_since, a.submit_started_at) AS since
        FROM task_attempts a JOIN generation_tasks t ON t.current_attempt_id = a.id
        WHERE a.submit_state IN ('SUBMITTING', 'SUBMIT_UNKNOWN') AND t.terminal_at IS NULL
          AND t.status <> 'manual_review'
          AND COALESCE(a.unknown_since, a.submit_started_at) < now() - make_interval(secs => ${secs(unknownAfter)})
          AND (${from === null} OR (COALESCE(a.unknown_since, a.submit_started_at), a.task_id)
               > (${from?.since ?? new Date(0)}, ${from?.taskId ?? "00000000-0000-0000-0000-000000000000"}::uuid))
        ORDER BY COALESCE(a.unknown_since, a.submit_started_at), a.task_id LIMIT ${UNKNOWN_PAGE}`
      const last = rows[rows.length - 1]
      after = rows.length < UNKNOWN_PAGE || last === undefined ? null : { since: last.since, taskId: last.task_id }
      if (rows.length > 0) yield* wakeTasks(tasks, rows.map((r) => r.task_id), "reconcile-submit-unknown")
    })

    /** Tasks past their expected duration: recorded once for a human, and woken. */
    const overdueTasks = Effect.gen(function*() {
      const rows = yield* sql<{ id: string }>`
        INSERT INTO task_reconciliations (task_id, attempt_id, reason, dedup_key, observation)
        SELECT t.id, t.current_attempt_id, 'overdue', 'overdue', jsonb_build_object('status', t.status)
        FROM generation_tasks t
        WHERE t.terminal_at IS NULL AND t.created_at < now() - make_interval(secs => ${secs(expectedMax)})
        ON CONFLICT (task_id, dedup_key) DO NOTHING
        RETURNING task_id AS id`
      if (rows.length > 0) {
        yield* Effect.logWarning("tasks past their expected duration").pipe(Effect.annotateLogs({ count: rows.length }))
        yield* wakeTasks(tasks, rows.map((r) => r.id), "reconcile-overdue")
      }
    })

    /** Outputs whose provider URL expires soon and that are not stored yet: woken, earliest deadline first. */
    const outputsNearDeadline = Effect.gen(function*() {
      const rows = yield* sql<{ task_id: string }>`
        SELECT a.task_id FROM task_attempts a JOIN generation_tasks t ON t.current_attempt_id = a.id
        WHERE a.submit_state = 'SUCCEEDED' AND a.output_deadline_at IS NOT NULL
          AND a.output_deadline_at < now() + make_interval(secs => ${secs(outputMargin)})
          AND t.status IN ('provider_succeeded', 'fetching_output', 'output_at_risk', 'processing_media')
        ORDER BY a.output_deadline_at LIMIT 500`
      if (rows.length > 0) {
        yield* Effect.logWarning("outputs near their deadline").pipe(Effect.annotateLogs({ count: rows.length }))
        yield* wakeTasks(tasks, rows.map((r) => r.task_id), "reconcile-output-deadline")
      }
    })

    /**
     * Terminal tasks whose reserve was neither settled nor refunded. The terminal commit writes the settlement
     * itself, so this finds only tasks from before that rule or repaired by hand; it writes the missing row.
     */
    const unsettledReserves = Effect.gen(function*() {
      const rows = yield* sql<{ task_id: string }>`
        INSERT INTO credit_ledger (tenant_id, task_id, attempt_id, ledger_type, amount)
        SELECT r.tenant_id, r.task_id, t.current_attempt_id,
          CASE WHEN t.status = 'ready' THEN 'settle' ELSE 'refund' END, r.amount
        FROM credit_ledger r JOIN generation_tasks t ON t.id = r.task_id
        WHERE r.ledger_type = 'reserve' AND t.terminal_at IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM credit_ledger s WHERE s.task_id = r.task_id
                          AND s.ledger_type IN ('settle', 'refund'))
        LIMIT 1000
        ON CONFLICT DO NOTHING
        RETURNING task_id`
      if (rows.length > 0) {
        yield* Effect.logError("reserves settled by the reconciler").pipe(Effect.annotateLogs({ count: rows.length }))
      }
    })

    yield* runPeriodically({
      interval,
      failure: "reconciler failed",
      checks: [stuckInbox, unknownSubmits, overdueTasks, outputsNearDeadline, unsettledReserves]
    })
  })
)
