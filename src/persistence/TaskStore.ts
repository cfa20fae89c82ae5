import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"
import type { Change } from "../entities/transition.js"
import { WriteFenced } from "../schema/errors.js"
import { EventCursor } from "../schema/cursor.js"
import type { AttemptId, TaskId } from "../schema/ids.js"
import type { ProviderObservation } from "../schema/observation.js"
import { AttemptSnapshot, TaskSnapshot } from "../schema/task.js"
import { FENCE_SCOPE, WriteFence } from "./WriteFence.js"

export interface TaskState {
  readonly task: TaskSnapshot
  readonly attempt: AttemptSnapshot | null
}

/** The result of one commit attempt: applied, or lost the version CAS (reload and re-evaluate). */
export type CommitResult =
  | { readonly _tag: "Committed"; readonly task: TaskSnapshot; readonly attempt: AttemptSnapshot | null }
  | { readonly _tag: "Stale" }

const TASK_COLUMNS = `t.id, t.tenant_id, t.project_id, t.user_id, t.status, t.stage, t.progress, t.version,
  t.current_attempt_id, t.home_region, t.write_epoch, t.asset_id, t.error_code, t.last_seq, p.stream_epoch,
  t.created_at, t.updated_at, t.terminal_at`

export const taskFromRow = (r: Record<string, any>): TaskSnapshot =>
  new TaskSnapshot({
    id: r.id,
    tenantId: r.tenant_id,
    projectId: r.project_id,
    userId: r.user_id,
    status: r.status,
    stage: r.stage,
    progress: r.progress,
    version: r.version,
    currentAttemptId: r.current_attempt_id,
    homeRegion: r.home_region,
    writeEpoch: r.write_epoch,
    assetId: r.asset_id,
    errorCode: r.error_code,
    lastCursor: new EventCursor({ epoch: r.stream_epoch, seq: r.last_seq }),
    createdAt: r.created_at,
    updatedAt: r.updated_at,
    terminalAt: r.terminal_at
  })

const attemptFromRow = (r: Record<string, any>): AttemptSnapshot =>
  new AttemptSnapshot({
    id: r.id,
    taskId: r.task_id,
    attemptNo: r.attempt_no,
    provider: r.provider,
    model: r.model,
    clientRequestId: r.client_request_id,
    providerTaskId: r.provider_task_id,
    submitState: r.submit_state,
    lastProviderSeq: r.last_provider_seq,
    lastProviderAt: r.last_provider_at,
    unknownSince: r.unknown_since,
    outputRefs: r.output_refs
  })

/**
 * Reads and writes one task's facts. `commit` is the only way a task changes after creation: ONE statement
 * (so one transaction and one round trip) that checks the write fence, CASes the version, takes the next
 * cursor of the project's stream, and writes the task, the attempt, the task event and the outbox row.
 */
export class TaskStore extends Effect.Service<TaskStore>()("TaskStore", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const { token } = yield* WriteFence

    const load = Effect.fn("TaskStore.load")(function*(taskId: TaskId) {
      const tasks = yield* sql.unsafe<Record<string, any>>(
        `SELECT ${TASK_COLUMNS} FROM generation_tasks t JOIN projects p ON p.project_id = t.project_id
         WHERE t.id = $1`,
        [taskId]
      )
      if (tasks.length === 0) return Option.none<TaskState>()
      const task = taskFromRow(tasks[0]!)
      if (task.currentAttemptId === null) return Option.some<TaskState>({ task, attempt: null })
      const attempts = yield* sql<Record<string, any>>`SELECT * FROM task_attempts WHERE id = ${task.currentAttemptId}`
      return Option.some<TaskState>({ task, attempt: attempts.length === 0 ? null : attemptFromRow(attempts[0]!) })
    }, Effect.orDie)

    const commit = Effect.fn("TaskStore.commit")(function*(expected: TaskSnapshot, change: Change) {
      const next = change.task
      const a = change.attempt
      const eventId = crypto.randomUUID()
      const domainEvent = JSON.stringify({ ...change.domainEvent, event_id: eventId })
      const rows = yield* sql<{ fence_ok: number; epoch: number | null; seq: number | null }>`
        WITH fence AS (
          SELECT 1 FROM region_write_fence
          WHERE resource_scope = ${FENCE_SCOPE} AND active_region = ${token.region} AND write_epoch = ${token.epoch}
            AND mode NOT IN ('READ_ONLY', 'MAINTENANCE')
        ), cur AS (
          SELECT id, project_id FROM generation_tasks
          WHERE id = ${next.id} AND version = ${expected.version} AND write_epoch <= ${token.epoch}
            AND EXISTS (SELECT 1 FROM fence)
          FOR UPDATE
        ), stream AS (
          UPDATE projects p SET last_seq = p.last_seq + 1 FROM cur WHERE p.project_id = cur.project_id
          RETURNING p.stream_epoch, p.last_seq
        ), upd AS (
          UPDATE generation_tasks t SET
            status = ${next.status}, stage = ${next.stage}, progress = ${next.progress}, version = ${next.version},
            current_attempt_id = ${next.currentAttemptId}, asset_id = ${next.assetId}, error_code = ${next.errorCode},
            home_region = ${token.region}, write_epoch = ${token.epoch}, last_seq = stream.last_seq,
            updated_at = ${next.updatedAt}, terminal_at = ${next.terminalAt}
          FROM stream WHERE t.id = ${next.id}
          RETURNING t.id
        ), att AS (
          UPDATE task_attempts SET
            submit_state = ${a?.submitState ?? null}, provider_task_id = ${a?.providerTaskId ?? null},
            last_provider_seq = ${a?.lastProviderSeq ?? null}, last_provider_at = ${a?.lastProviderAt ?? null},
            unknown_since = ${a?.unknownSince ?? null}, output_refs = ${JSON.stringify(a?.outputRefs ?? [])}::jsonb,
            updated_at = ${next.updatedAt}
          FROM upd WHERE task_attempts.id = ${a?.id ?? null}::uuid
          RETURNING 1
        ), ev AS (
          INSERT INTO task_events (event_id, tenant_id, project_id, task_id, attempt_id, task_version, stream_epoch,
            cursor_seq, event_type, public_payload, source, trace_id, created_at)
          SELECT ${eventId}, ${next.tenantId}, ${next.projectId}, ${next.id}, ${next.currentAttemptId}, ${next.version},
            stream.stream_epoch, stream.last_seq, ${change.eventType}, ${JSON.stringify(change.publicPayload)}::jsonb,
            ${change.source}, ${change.domainEvent.trace_id}, ${next.updatedAt}
          FROM stream
          RETURNING 1
        ), ob AS (
          INSERT INTO outbox_events (event_id, aggregate_type, aggregate_id, aggregate_version, event_type, payload,
            home_region, write_epoch, created_at)
          SELECT ${eventId}, 'generation_task', ${next.id}, ${next.version}, ${change.eventType},
            ${domainEvent}::jsonb || jsonb_build_object('cursor', stream.stream_epoch || '-' || stream.last_seq),
            ${token.region}, ${token.epoch}, ${next.updatedAt}
          FROM stream
          RETURNING 1
        )
        SELECT (SELECT count(*) FROM fence)::int AS fence_ok,
               (SELECT stream_epoch FROM stream) AS epoch, (SELECT last_seq FROM stream) AS seq`
      const row = rows[0]!
      if (row.fence_ok === 0) {
        return yield* new WriteFenced({ reason: `region ${token.region} epoch ${token.epoch} may not write now` })
      }
      if (row.seq === null || row.epoch === null) return { _tag: "Stale" } as CommitResult
      const task = new TaskSnapshot({
        ...next,
        homeRegion: token.region,
        writeEpoch: token.epoch,
        lastCursor: new EventCursor({ epoch: row.epoch, seq: row.seq })
      })
      return { _tag: "Committed", task, attempt: a } as CommitResult
    }, (effect) => Effect.catchTag(effect, "SqlError", Effect.die))

    /** Contradictory or suspicious facts go to reconciliation, once per (task, dedup key). */
    const recordReconciliation = Effect.fn("TaskStore.recordReconciliation")(function*(
      taskId: TaskId,
      attemptId: AttemptId | null,
      reason: string,
      observation: ProviderObservation
    ) {
      yield* sql`
        INSERT INTO task_reconciliations (task_id, attempt_id, reason, dedup_key, observation)
        VALUES (${taskId}, ${attemptId}, ${reason}, ${observation.dedupKey},
                ${JSON.stringify({ status: observation.status, source: observation.source, provider: observation.provider })}::jsonb)
        ON CONFLICT (task_id, dedup_key) DO NOTHING`
    }, Effect.orDie)

    return { load, commit, recordReconciliation, fence: token } as const
  })
}) {}
