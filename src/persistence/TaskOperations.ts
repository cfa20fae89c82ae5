import { SqlClient } from "@effect/sql"
import { Data, Effect } from "effect"
import type { AttemptId, TaskId } from "../schema/ids.js"
import { storageUnavailable } from "./storageUnavailable.js"

const unavailable = storageUnavailable("task operations")

export type OperationType = "fetch_output"

/** What `claim` found: the stored result, the operation now ours (with its token), or another holder's live lease. */
export type Claim = Data.TaggedEnum<{
  Done: { readonly result: unknown }
  Claimed: { readonly token: number }
  Leased: { readonly retryInMs: number }
}>
export const Claim = Data.taggedEnum<Claim>()

export interface PendingOutput {
  readonly task_id: string
  readonly attempt_id: string
  readonly task_status: string
  readonly deadline_at: Date | null
  /** null: not claimed yet */
  readonly fetch_status: string | null
  readonly claims: number
  readonly lease_until: Date | null
  readonly last_error: string | null
  readonly updated_at: Date
}

/**
 * Side effects of a task done at most once per (task, attempt, operation type): the row is the idempotency key
 * (UNIQUE(task_id, attempt_id, operation_type)) and keeps the result, so a replay after a crash or a shard move
 * finds the work done instead of doing it again. While the work runs the row is `running` under a lease
 * (`next_run_at`, renewed by its holder): an old owner still at work after a shard move keeps the new one waiting
 * instead of both doing it; a holder that died lets it go when the lease lapses. `attempts` counts the claims and
 * is the holder's token (a renewal by a holder whose lease was taken over changes nothing).
 */
export class TaskOperations extends Effect.Service<TaskOperations>()("TaskOperations", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /** Takes the operation for `leaseMs` unless it is done or another holder's lease is live. */
    const claim = Effect.fn("TaskOperations.claim")(function*(
      taskId: TaskId,
      attemptId: AttemptId,
      type: OperationType,
      deadline: Date | null,
      leaseMs: number
    ) {
      const lease = leaseMs / 1000
      // one statement: insert the row as ours, or take it over (not done, no live lease), or report what holds it;
      // a claimer that lost a race on the insert sees no row at all (the winner's is not in its snapshot)
      const rows = yield* sql<{ status: string; attempts: number; result: unknown; mine: boolean; wait_ms: number }>`
        WITH ins AS (
          INSERT INTO task_operations (task_id, attempt_id, operation_type, deadline_at, status, attempts, next_run_at)
          VALUES (${taskId}, ${attemptId}, ${type}, ${deadline}, 'running', 1,
                  now() + make_interval(secs => ${lease}))
          ON CONFLICT (task_id, attempt_id, operation_type) DO NOTHING
          RETURNING status, attempts, result
        ), upd AS (
          UPDATE task_operations SET status = 'running', attempts = attempts + 1,
            next_run_at = now() + make_interval(secs => ${lease}), updated_at = now()
          WHERE task_id = ${taskId} AND attempt_id = ${attemptId} AND operation_type = ${type}
            AND NOT EXISTS (SELECT 1 FROM ins)
            AND status <> 'done' AND NOT (status = 'running' AND next_run_at > now())
          RETURNING status, attempts, result
        )
        SELECT status, attempts, result, true AS mine, 0::float8 AS wait_ms FROM ins
        UNION ALL
        SELECT status, attempts, result, true, 0 FROM upd
        UNION ALL
        SELECT status, attempts, result, false,
          GREATEST(0, EXTRACT(EPOCH FROM (next_run_at - now())) * 1000)::float8
        FROM task_operations
        WHERE task_id = ${taskId} AND attempt_id = ${attemptId} AND operation_type = ${type}
          AND NOT EXISTS (SELECT 1 FROM ins) AND NOT EXISTS (SELECT 1 FROM upd)`
      const row = rows[0]
      if (row === undefined) return Claim.Leased({ retryInMs: 1000 })
      if (row.status === "done") return Claim.Done({ result: row.result })
      if (row.mine) return Claim.Claimed({ token: row.attempts })
      // a lease that lapsed between the update and the select: look again soon
      return Claim.Leased({ retryInMs: Math.max(250, Math.ceil(row.wait_ms)) })
    }, Effect.catchTag("SqlError", unavailable))

    /** Extends the holder's lease; false when it is no longer the holder (its lease lapsed and was taken). */
    const renew = Effect.fn("TaskOperations.renew")(function*(
      taskId: TaskId,
      attemptId: AttemptId,
      type: OperationType,
      token: number,
      leaseMs: number
    ) {
      const rows = yield* sql`
        UPDATE task_operations SET next_run_at = now() + make_interval(secs => ${leaseMs / 1000}), updated_at = now()
        WHERE task_id = ${taskId} AND attempt_id = ${attemptId} AND operation_type = ${type}
          AND status = 'running' AND attempts = ${token}
        RETURNING 1`
      return rows.length > 0
    }, Effect.catchTag("SqlError", unavailable))

    const complete = Effect.fn("TaskOperations.complete")(function*(
      taskId: TaskId,
      attemptId: AttemptId,
      type: OperationType,
      result: unknown
    ) {
      yield* sql`
        UPDATE task_operations SET status = 'done', result = ${JSON.stringify(result)}::jsonb,
          next_run_at = NULL, last_error = NULL, updated_at = now()
        WHERE task_id = ${taskId} AND attempt_id = ${attemptId} AND operation_type = ${type}`
    }, Effect.catchTag("SqlError", unavailable))

    const failed = Effect.fn("TaskOperations.failed")(function*(
      taskId: TaskId,
      attemptId: AttemptId,
      type: OperationType,
      error: string,
      retryInMs: number | null
    ) {
      yield* sql`
        UPDATE task_operations SET status = ${retryInMs === null ? "failed" : "retry"},
          next_run_at = CASE WHEN ${retryInMs === null} THEN NULL
                             ELSE now() + make_interval(secs => ${(retryInMs ?? 0) / 1000}) END,
          last_error = ${error}, updated_at = now()
        WHERE task_id = ${taskId} AND attempt_id = ${attemptId} AND operation_type = ${type}`
    }, Effect.catchTag("SqlError", unavailable))

    /**
     * A done operation whose result is gone (the output object is missing from the store): to be done again. The
     * old result stays in the row until the next completion replaces it; `last_error` says why it was reopened.
     * True when it was done (and is now open again).
     */
    const reopen = Effect.fn("TaskOperations.reopen")(function*(
      taskId: TaskId,
      attemptId: AttemptId,
      type: OperationType,
      reason: string
    ) {
      const rows = yield* sql`
        UPDATE task_operations SET status = 'retry', next_run_at = now(), last_error = ${reason}, updated_at = now()
        WHERE task_id = ${taskId} AND attempt_id = ${attemptId} AND operation_type = ${type} AND status = 'done'
        RETURNING 1`
      return rows.length > 0
    }, Effect.catchTag("SqlError", unavailable))

    /**
     * Outputs not yet stored and checked (tasks fetching, probing or at risk), the closest to their URL's deadline
     * first, with their fetch's state: what operators watch while a store or a provider's storage is failing.
     */
    const pendingOutputs = (limit: number) =>
      sql<PendingOutput>`
        SELECT t.id AS task_id, t.current_attempt_id AS attempt_id, t.status AS task_status,
          a.output_deadline_at AS deadline_at, o.status AS fetch_status, COALESCE(o.attempts, 0)::int AS claims,
          CASE WHEN o.status = 'running' THEN o.next_run_at END AS lease_until, o.last_error, t.updated_at
        FROM generation_tasks t
        JOIN task_attempts a ON a.id = t.current_attempt_id
        LEFT JOIN task_operations o ON o.task_id = t.id AND o.attempt_id = t.current_attempt_id
          AND o.operation_type = 'fetch_output'
        WHERE t.status IN ('fetching_output', 'output_at_risk', 'processing_media')
        ORDER BY a.output_deadline_at ASC NULLS LAST, t.updated_at ASC
        LIMIT ${limit}`.pipe(Effect.catchTag("SqlError", unavailable), Effect.withSpan("TaskOperations.pendingOutputs"))

    return { claim, renew, complete, failed, reopen, pendingOutputs } as const
  })
}) {}
