import { SqlClient } from "@effect/sql"
import { Data, Effect, Metric, Option, Schedule } from "effect"
import * as S from "../config/Settings.js"
import { domainEventOf, publicPayloadOf } from "../domain/taskEvents.js"
import { taskTransitions } from "../observability/metrics.js"
import { labelled } from "../observability/series.js"
import { retryAfterFailure } from "../runtime/retry.js"
import { AdmissionsThrottled, IdempotencyKeyReused, ProjectNotFound } from "../schema/errors.js"
import type { ProjectId, ProviderName, TaskId, TenantId, UserId } from "../schema/ids.js"
import type { TaskSnapshot } from "../schema/task.js"
import { storageUnavailable } from "./storageUnavailable.js"
import { taskFromRow } from "./TaskStore.js"
import { logStatusChange } from "./transitionLog.js"
import { WriteFence } from "./WriteFence.js"

const unavailable = storageUnavailable("task admission")

export const AdmissionSettings = S.area("Admission", "when new tasks are refused", {
  // seed 19.3.5: when the event queue cannot keep up (or is down), the outbox grows; past the watermark new
  // work is refused (503) so that existing tasks keep moving and the backlog can drain
  backlogWatermark: S.integer(
    "OUTBOX_BACKLOG_WATERMARK",
    "unpublished outbox events past which new tasks are refused (503) so that existing ones keep moving",
    50_000,
    { min: 1 }
  ),
  backlogCheck: S.duration(
    "OUTBOX_BACKLOG_CHECK_INTERVAL",
    "how long admission trusts its last count of the outbox backlog before counting again",
    "1 second"
  )
})

export interface Admission {
  readonly tenantId: TenantId
  readonly projectId: ProjectId
  readonly userId: UserId
  readonly idempotencyKey: string
  readonly requestHash: string
  readonly request: unknown
  readonly provider: ProviderName
  readonly model: string
  readonly reserveAmount: number
  readonly traceId: string
}

/** Another transaction inserted the same idempotency key first: roll back (keeping the stream gap-free) and re-read. */
class LostKeyRace extends Data.TaggedError("LostKeyRace") {}

/**
 * Admits new tasks: ONE transaction writes the task, its first attempt (PREPARED, with the client_request_id
 * the provider will later echo), the credit reserve, the `task.created` event and its outbox row.
 */
export class TaskAdmission extends Effect.Service<TaskAdmission>()("TaskAdmission", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const { admitting } = yield* WriteFence

    const byKey = (tenantId: TenantId, key: string) =>
      sql<Record<string, any>>`
        SELECT t.*, p.stream_epoch FROM generation_tasks t JOIN projects p ON p.project_id = t.project_id
        WHERE t.tenant_id = ${tenantId} AND t.idempotency_key = ${key}`

    const replay = (a: Admission, row: Record<string, any>) =>
      row.request_hash === a.requestHash && row.project_id === a.projectId
        ? Effect.succeed({ task: taskFromRow(row), created: false })
        : Effect.fail(
          new IdempotencyKeyReused({ message: "this Idempotency-Key was already used with a different request" })
        )

    const insert = (a: Admission) =>
      Effect.gen(function*() {
        const token = yield* admitting(a.provider)
        const existing = yield* byKey(a.tenantId, a.idempotencyKey)
        if (existing.length > 0) return yield* replay(a, existing[0]!)
        // the project exists already, made by its owner (POST /v1/projects): naming an id creates nothing
        const stream = yield* sql<{ stream_epoch: number; last_seq: number }>`
          UPDATE projects SET last_seq = last_seq + 1
          WHERE project_id = ${a.projectId} AND tenant_id = ${a.tenantId}
          RETURNING stream_epoch, last_seq`
        if (stream.length === 0) return yield* new ProjectNotFound({ projectId: a.projectId })
        const { last_seq: seq, stream_epoch: epoch } = stream[0]!
        const taskId = crypto.randomUUID() as TaskId
        const attemptId = crypto.randomUUID()
        const eventId = crypto.randomUUID()
        // the task as its row will read, and what its row is written from (its times this runner's clock, as every
        // later commit's updated_at): its event and outbox message are built from it before the one statement that
        // writes all five rows
        const now = new Date()
        const task = taskFromRow({
          id: taskId,
          tenant_id: a.tenantId,
          project_id: a.projectId,
          user_id: a.userId,
          status: "queued",
          stage: "queued",
          progress: null,
          version: 1,
          current_attempt_id: attemptId,
          home_region: token.region,
          write_epoch: token.epoch,
          asset_id: null,
          error_code: null,
          last_seq: seq,
          stream_epoch: epoch,
          created_at: now,
          updated_at: now,
          terminal_at: null
        })
        // one round trip: the attempt, the credit reserve, the event and the outbox row are written only with the
        // task (FROM task: nothing when its idempotency key was taken meanwhile); the references are checked at the
        // statement's end, when the task row is there
        const written = yield* sql<{ inserted: number }>`
          WITH task AS (
            INSERT INTO generation_tasks (id, tenant_id, project_id, user_id, idempotency_key, request_hash, request,
              status, stage, progress, version, last_seq, current_attempt_id, home_region, write_epoch, created_at,
              updated_at)
            VALUES (${task.id}, ${task.tenantId}, ${task.projectId}, ${task.userId}, ${a.idempotencyKey},
              ${a.requestHash}, ${JSON.stringify(a.request)}::jsonb, ${task.status}, ${task.stage}, ${task.progress},
              ${task.version}, ${seq}, ${task.currentAttemptId}, ${task.homeRegion}, ${task.writeEpoch},
              ${task.createdAt}, ${task.updatedAt})
            ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
            RETURNING id
          ), attempt AS (
            INSERT INTO task_attempts (id, task_id, attempt_no, provider, model, client_request_id, submit_state)
            SELECT ${attemptId}, id, 1, ${a.provider}, ${a.model}, ${crypto.randomUUID()}, 'PREPARED' FROM task
          ), credit AS (
            INSERT INTO credit_ledger (tenant_id, task_id, attempt_id, ledger_type, amount)
            SELECT ${a.tenantId}, id, NULL, 'reserve', ${a.reserveAmount} FROM task
          ), event AS (
            INSERT INTO task_events (event_id, tenant_id, project_id, task_id, attempt_id, task_version,
              stream_epoch, cursor_seq, event_type, public_payload, source, trace_id)
            SELECT ${eventId}, ${a.tenantId}, ${a.projectId}, id, ${attemptId}, 1, ${epoch}, ${seq}, 'task.created',
              ${JSON.stringify(publicPayloadOf(task))}::jsonb, 'api', ${a.traceId} FROM task
          ), outbox AS (
            INSERT INTO outbox_events (event_id, aggregate_type, aggregate_id, aggregate_version, event_type,
              payload, home_region, write_epoch)
            SELECT ${eventId}, 'generation_task', id, 1, 'task.created', ${
          JSON.stringify(createdEvent(task, eventId, a.traceId))
        }::jsonb, ${token.region}, ${token.epoch} FROM task
          )
          SELECT count(*)::int AS inserted FROM task`
        if (written[0]?.inserted !== 1) return yield* new LostKeyRace()
        return { task, created: true }
      }).pipe(sql.withTransaction)

    const { backlogCheck, backlogWatermark: watermark } = yield* AdmissionSettings.config
    const backlog = yield* Effect.cachedWithTTL(
      sql<{ n: number }>`
        SELECT count(*)::int AS n FROM (SELECT 1 FROM outbox_events WHERE published_at IS NULL
        LIMIT ${watermark + 1}) b`.pipe(Effect.map((rows) => rows[0]!.n), Effect.orElseSucceed(() => 0)),
      backlogCheck
    )

    const admit = Effect.fn("TaskAdmission.admit")(function*(a: Admission) {
      if ((yield* backlog) > watermark) {
        return yield* new AdmissionsThrottled({ message: "the event backlog is too large: retry later" })
      }
      // a lost race on the idempotency key is tried again (the winner's row is then found)
      const inserted = retryAfterFailure(insert(a), {
        while: (e) => e._tag === "LostKeyRace",
        schedule: Schedule.recurs(2)
      })
      return yield* inserted.pipe(
        Effect.tap((r) =>
          r.created ? logStatusChange(null, r.task, { source: "api", traceId: a.traceId }) : Effect.void
        ),
        Effect.catchTag("LostKeyRace", () => Effect.dieMessage("idempotency key race did not settle")),
        Effect.catchTag("SqlError", unavailable),
        Effect.tap((r) => r.created ? Metric.increment(createdTransitions) : Effect.void)
      )
    })

    /** A task as its tenant may see it: another tenant's or another project's task does not exist. */
    const find = Effect.fn("TaskAdmission.find")(function*(tenantId: TenantId, projectId: ProjectId, taskId: string) {
      const rows = yield* sql<Record<string, any>>`
        SELECT t.*, p.stream_epoch FROM generation_tasks t JOIN projects p ON p.project_id = t.project_id
        WHERE t.id = ${taskId} AND t.tenant_id = ${tenantId} AND t.project_id = ${projectId}`
      return rows.length === 0 ? Option.none<TaskSnapshot>() : Option.some(taskFromRow(rows[0]!))
    }, Effect.catchTag("SqlError", unavailable))

    return { admit, find } as const
  })
}) {}

/** A task created by the API is its first transition: to queued. */
const createdTransitions = labelled(taskTransitions, { source: "api", to: "queued" })

const createdEvent = (task: TaskSnapshot, eventId: string, traceId: string) => ({
  ...domainEventOf(task, { eventType: "task.created", source: "api", traceId, occurredAt: task.createdAt }),
  event_id: eventId,
  cursor: task.lastCursor.toString()
})
