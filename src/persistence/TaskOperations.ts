import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"
import type { AttemptId, TaskId } from "../schema/ids.js"
import { storageUnavailable } from "./storageUnavailable.js"

const unavailable = storageUnavailable("task operations")

export type OperationType = "fetch_output"

/**
 * Side effects of a task done at most once per (task, attempt, operation type): the row is the idempotency key
 * (UNIQUE(task_id, attempt_id, operation_type)) and keeps the result, so a replay after a crash or a shard move
 * finds the work done instead of doing it again.
 */
export class TaskOperations extends Effect.Service<TaskOperations>()("TaskOperations", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /** The operation's stored result if it already completed; otherwise records (or re-finds) it as pending. */
    const begin = Effect.fn("TaskOperations.begin")(function*(
      taskId: TaskId,
      attemptId: AttemptId,
      type: OperationType,
      deadline: Date | null
    ) {
      const rows = yield* sql<{ status: string; result: unknown }>`
        WITH ins AS (
          INSERT INTO task_operations (task_id, attempt_id, operation_type, deadline_at, next_run_at)
          VALUES (${taskId}, ${attemptId}, ${type}, ${deadline}, now())
          ON CONFLICT (task_id, attempt_id, operation_type) DO NOTHING
          RETURNING status, result
        )
        SELECT status, result FROM ins
        UNION ALL
        SELECT status, result FROM task_operations
        WHERE task_id = ${taskId} AND attempt_id = ${attemptId} AND operation_type = ${type}`
      const done = rows.find((r) => r.status === "done")
      return done === undefined ? Option.none<unknown>() : Option.some(done.result)
    }, Effect.catchTag("SqlError", unavailable))

    const complete = Effect.fn("TaskOperations.complete")(function*(
      taskId: TaskId,
      attemptId: AttemptId,
      type: OperationType,
      result: unknown
    ) {
      yield* sql`
        UPDATE task_operations SET status = 'done', result = ${JSON.stringify(result)}::jsonb, attempts = attempts + 1,
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
        UPDATE task_operations SET status = ${retryInMs === null ? "failed" : "retry"}, attempts = attempts + 1,
          next_run_at = CASE WHEN ${retryInMs === null} THEN NULL
                             ELSE now() + make_interval(secs => ${(retryInMs ?? 0) / 1000}) END,
          last_error = ${error}, updated_at = now()
        WHERE task_id = ${taskId} AND attempt_id = ${attemptId} AND operation_type = ${type}`
    }, Effect.catchTag("SqlError", unavailable))

    return { begin, complete, failed } as const
  })
}) {}
