import { Schema } from "effect"
import { EventCursorFromString } from "./cursor.js"
import { AttemptId, ProjectId, TaskId, TenantId, UserId } from "./ids.js"
import { Progress, PublicErrorCode, Stage, TaskStatus } from "./task.js"

export const TaskEventType = Schema.Literal("task.created", "task.status.changed")
export type TaskEventType = typeof TaskEventType.Type

export const EventSource = Schema.Literal("api", "webhook", "poll", "reconcile", "system", "operator")
export type EventSource = typeof EventSource.Type

/**
 * The browser-safe view of one task change: stored in task_events.public_payload and sent as SSE `data:`.
 * Only these fields ever leave the system towards a browser (no provider ids, raw errors or URLs).
 */
export const PublicTaskPayload = Schema.Struct({
  task_id: TaskId,
  task_version: Schema.NonNegativeInt,
  status: TaskStatus,
  stage: Stage,
  progress: Schema.NullOr(Progress),
  asset_id: Schema.NullOr(Schema.String),
  error_code: Schema.NullOr(PublicErrorCode)
})
export type PublicTaskPayload = typeof PublicTaskPayload.Type

/** The domain event (seed 12.5.5) written to the outbox and published to RocketMQ with key = task id. */
export const DomainEvent = Schema.Struct({
  event_id: Schema.UUID,
  event_type: TaskEventType,
  schema_version: Schema.Literal(1),
  aggregate_id: TaskId,
  aggregate_version: Schema.NonNegativeInt,
  tenant_id: TenantId,
  project_id: ProjectId,
  user_id: UserId,
  attempt_id: Schema.NullOr(AttemptId),
  cursor: EventCursorFromString,
  status: TaskStatus,
  stage: Stage,
  progress: Schema.NullOr(Progress),
  asset_id: Schema.NullOr(Schema.String),
  error_code: Schema.NullOr(PublicErrorCode),
  source: EventSource,
  home_region: Schema.String,
  write_epoch: Schema.NonNegativeInt,
  occurred_at: Schema.String,
  trace_id: Schema.String
})
export type DomainEvent = typeof DomainEvent.Type

/**
 * What the notification bus carries to gateways (one project's channel): the browser-safe payload and the stream
 * cursor that orders it. A gateway decodes it with this schema before anything reaches a browser.
 */
export const LiveTaskEvent = Schema.Struct({
  cursor: Schema.String,
  event_type: TaskEventType,
  payload: PublicTaskPayload,
  // optional: a message published by a runner older than this field still decodes
  trace_id: Schema.optional(Schema.String),
  /** when the change was made (its domain event's occurred_at): for the commit → delivery latency, never sent on */
  committed_at: Schema.optional(Schema.String)
})
export type LiveTaskEvent = typeof LiveTaskEvent.Type
