import type { DomainEvent, EventSource, LiveTaskEvent, PublicTaskPayload, TaskEventType } from "../schema/events.js"
import type { TaskSnapshot } from "../schema/task.js"

/** The fields of a task that a browser may see, wherever they are held (a snapshot, a domain event). */
type PublicFields = Pick<TaskSnapshot, "id" | "version" | "status" | "stage" | "progress" | "assetId" | "errorCode">

/**
 * What a browser may see of a task at this version (task_events.public_payload, SSE `data:`, the bus): the one
 * builder of it, so no path can leak a field the others hide.
 */
export const publicPayloadOf = (task: PublicFields): PublicTaskPayload => ({
  task_id: task.id,
  task_version: task.version,
  status: task.status,
  stage: task.stage,
  progress: task.progress,
  asset_id: task.assetId,
  error_code: task.errorCode
})

/** The outbox message for a task at this version; event_id and cursor are added where the write happens. */
export const domainEventOf = (
  task: TaskSnapshot,
  meta: {
    readonly eventType: TaskEventType
    readonly source: EventSource
    readonly traceId: string
    readonly occurredAt: Date
  }
): Omit<DomainEvent, "event_id" | "cursor"> => ({
  event_type: meta.eventType,
  schema_version: 1,
  aggregate_id: task.id,
  aggregate_version: task.version,
  tenant_id: task.tenantId,
  project_id: task.projectId,
  user_id: task.userId,
  attempt_id: task.currentAttemptId,
  status: task.status,
  stage: task.stage,
  progress: task.progress,
  asset_id: task.assetId,
  error_code: task.errorCode,
  source: meta.source,
  home_region: task.homeRegion,
  write_epoch: task.writeEpoch,
  occurred_at: meta.occurredAt.toISOString(),
  trace_id: meta.traceId
})

/** What the live notification of a domain event reads of it (the cursor as a cursor, or already as its text). */
export type LiveSource =
  & Pick<
    DomainEvent,
    | "event_type"
    | "occurred_at"
    | "aggregate_id"
    | "aggregate_version"
    | "status"
    | "stage"
    | "progress"
    | "asset_id"
    | "error_code"
    | "trace_id"
  >
  & { readonly cursor: { readonly toString: () => string } }

/** The browser-safe notification of a domain event: what gateways receive on the project's channel. */
export const liveEventOf = (e: LiveSource): LiveTaskEvent => ({
  cursor: e.cursor.toString(),
  event_type: e.event_type,
  committed_at: e.occurred_at,
  payload: publicPayloadOf({
    id: e.aggregate_id,
    version: e.aggregate_version,
    status: e.status,
    stage: e.stage,
    progress: e.progress,
    assetId: e.asset_id,
    errorCode: e.error_code
  }),
  trace_id: e.trace_id
})
