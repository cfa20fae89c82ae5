import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import type { TaskId } from "../schema/ids.js"
import type { ProviderObservation } from "../schema/observation.js"
import { storageUnavailable } from "./storageUnavailable.js"

export interface LateResultRow {
  readonly id: number
  readonly task_id: string
  readonly attempt_id: string
  readonly attempt_no: number
  readonly provider: string
  readonly provider_task_id: string | null
  readonly model: string
  readonly status: string
  readonly error_class: string | null
  readonly error_code: string | null
  readonly output_refs: ReadonlyArray<string>
  readonly source: string
  readonly received_at: Date
  readonly recorded_at: Date
  readonly trace_id: string
}

/**
 * Terminal results of superseded attempts (seed 12.7.3; migration 0016): kept for cost reconciliation, never applied
 * to their task. Provider, model and attempt number come from the attempt's own row; the provider's job id from the
 * observation, else from that row.
 */
export class LateResults extends Effect.Service<LateResults>()("LateResults", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /** Records one late terminal result; true when it is new (a second delivery of the same end is false). */
    const record = Effect.fn("LateResults.record")(function*(taskId: TaskId, o: ProviderObservation) {
      const rows = yield* sql<{ id: number }>`
        INSERT INTO late_attempt_results (task_id, attempt_id, attempt_no, provider, provider_task_id, model, status,
          error_class, error_code, output_refs, source, provider_occurred_at, received_at, trace_id)
        SELECT a.task_id, a.id, a.attempt_no, a.provider, coalesce(${o.providerTaskId}, a.provider_task_id), a.model,
          ${o.status}, ${o.errorClass}, ${o.errorCode}, ${JSON.stringify(o.outputRefs)}::jsonb, ${o.source},
          ${o.providerOccurredAt}, ${o.receivedAt}, ${o.traceId}
        FROM task_attempts a WHERE a.id = ${o.attemptId} AND a.task_id = ${taskId}
        ON CONFLICT (attempt_id, status) DO NOTHING
        RETURNING id`
      return rows.length > 0
    }, Effect.catchTag("SqlError", storageUnavailable("late results")))

    /** Newest first, received at or after `since`, of `provider` if given. */
    const list = (options: { readonly since: Date | null; readonly provider: string | null; readonly limit: number }) =>
      sql<LateResultRow>`
        SELECT id, task_id, attempt_id, attempt_no, provider, provider_task_id, model, status, error_class, error_code,
          output_refs, source, received_at, recorded_at, trace_id
        FROM late_attempt_results
        WHERE (${options.since}::timestamptz IS NULL OR received_at >= ${options.since})
          AND (${options.provider}::text IS NULL OR provider = ${options.provider})
        ORDER BY received_at DESC, id DESC LIMIT ${options.limit}`.pipe(
        Effect.catchTag("SqlError", storageUnavailable("late results"))
      )

    return { record, list } as const
  })
}) {}
