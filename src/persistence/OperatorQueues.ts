import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"
import { OperationRefused } from "../schema/errors.js"
import { storageUnavailable } from "./storageUnavailable.js"

const unavailable = storageUnavailable("operator queues")

export interface ReviewRow {
  readonly task_id: string
  readonly tenant_id: string
  readonly project_id: string
  readonly provider: string | null
  readonly status: string
  readonly since: Date
  readonly reason: string
}

export interface ReconciliationRow {
  readonly id: number
  readonly task_id: string
  readonly attempt_id: string | null
  readonly reason: string
  readonly created_at: Date
}

/** A review page's position: the last task's (updated_at, id), so a page never repeats or skips a task. */
const encodeCursor = (r: ReviewRow) => `${r.since.toISOString()}_${r.task_id}`
const decodeCursor = (cursor: string) => {
  const [at, id] = cursor.split("_")
  const when = new Date(at ?? "")
  return Number.isNaN(when.getTime()) || !/^[0-9a-f-]{36}$/.test(id ?? "")
    ? Option.none()
    : Option.some({ at: when, id: id! })
}

/**
 * What operators look at and act on, besides the fence: the outbox backlog, the manual-review queue and the
 * open reconciliations.
 */
export class OperatorQueues extends Effect.Service<OperatorQueues>()("OperatorQueues", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /** Unpublished outbox rows and the age of the oldest (seed 19.10.1's "backlog, oldest age"). */
    const outbox = sql<{ backlog: number; oldest_age_seconds: number | null }>`
      SELECT count(*)::int AS backlog,
        EXTRACT(EPOCH FROM now() - min(created_at))::float8 AS oldest_age_seconds
      FROM outbox_events WHERE published_at IS NULL`.pipe(
      Effect.map((rows) => rows[0]!),
      Effect.catchTag("SqlError", unavailable)
    )

    /** Tasks waiting for a human, oldest first, a page at a time. */
    const review = (cursor: string | undefined, limit: number) =>
      Effect.gen(function*() {
        const after = cursor === undefined ? Option.none() : decodeCursor(cursor)
        if (cursor !== undefined && Option.isNone(after)) {
          return yield* new OperationRefused({ message: `not a review cursor: ${cursor.slice(0, 80)}` })
        }
        const from = Option.getOrNull(after)
        const rows = yield* sql<ReviewRow>`
          SELECT t.id AS task_id, t.tenant_id, t.project_id, a.provider, t.status, t.updated_at AS since,
            COALESCE(
              (SELECT r.reason FROM task_reconciliations r WHERE r.task_id = t.id AND r.resolved_at IS NULL
               ORDER BY r.id DESC LIMIT 1),
              CASE WHEN a.submit_state IN ('SUBMITTING', 'SUBMIT_UNKNOWN') THEN 'submit_unknown'
                   WHEN a.submit_state = 'SUCCEEDED' THEN 'output_in_doubt'
                   ELSE 'escalated' END) AS reason
          FROM generation_tasks t LEFT JOIN task_attempts a ON a.id = t.current_attempt_id
          WHERE t.status = 'manual_review'
            AND (${from === null} OR (t.updated_at, t.id) > (${from?.at ?? new Date(0)}, ${
          from?.id ?? "00000000-0000-0000-0000-000000000000"
        }::uuid))
          ORDER BY t.updated_at, t.id
          LIMIT ${limit + 1}`.pipe(Effect.catchTag("SqlError", unavailable))
        const page = rows.slice(0, limit)
        return { tasks: page, next_cursor: rows.length > limit ? encodeCursor(page[page.length - 1]!) : null }
      })

    const reconciliations = sql<ReconciliationRow>`
      SELECT id, task_id, attempt_id, reason, created_at FROM task_reconciliations
      WHERE resolved_at IS NULL ORDER BY created_at, id LIMIT 500`.pipe(Effect.catchTag("SqlError", unavailable))

    /** Marks an open reconciliation resolved; false when there is no such open one. */
    const resolveReconciliation = (id: number) =>
      sql<{ id: number; task_id: string }>`
        UPDATE task_reconciliations SET resolved_at = now() WHERE id = ${id} AND resolved_at IS NULL
        RETURNING id, task_id`.pipe(
        Effect.map((rows) => Option.fromNullable(rows[0])),
        Effect.catchTag("SqlError", unavailable)
      )

    return { outbox, review, reconciliations, resolveReconciliation } as const
  })
}) {}
