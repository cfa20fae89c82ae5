import { Schema } from "effect"
import { EventCursor } from "./cursor.js"
import { AttemptId, ProjectId, ProviderName, TaskId, TenantId, UserId } from "./ids.js"

/**
 * Constructor option for values the system builds itself from already-decoded values (transitions, rows it
 * wrote). Input is validated once where it enters (HTTP, webhooks, messages); re-validating every internal
 * construction cost more CPU than the database write it accompanies (measured with npm run bench:transitions).
 */
export const trusted = { disableValidation: true } as const

export const TaskStatus = Schema.Literal(
  "queued",
  "submitting",
  "submit_unknown",
  "submitted",
  "running",
  "provider_status_unknown",
  "cancel_requested",
  "provider_succeeded",
  "fetching_output",
  "output_at_risk",
  "processing_media",
  "manual_review",
  "ready",
  "failed",
  "canceled"
)
export type TaskStatus = typeof TaskStatus.Type

const terminalStatuses: ReadonlySet<TaskStatus> = new Set(["ready", "failed", "canceled"])
export const isTerminal = (status: TaskStatus): boolean => terminalStatuses.has(status)

/**
 * Stages in the order a task passes them. Progress is monotonic within a stage, and a task never
 * moves back to an earlier stage. Provider adapters map their own phases onto the provider_* stages.
 */
export const stages = [
  "queued",
  "submitting",
  "provider_queued",
  "starting",
  "generating",
  "generated",
  "fetching_output",
  "processing_media",
  "done"
] as const
export const Stage = Schema.Literal(...stages)
export type Stage = typeof Stage.Type
export const stageRank = (stage: Stage): number => stages.indexOf(stage)

export const SubmitState = Schema.Literal(
  "PREPARED",
  "SUBMITTING",
  "SUBMITTED",
  "SUBMIT_UNKNOWN",
  "REJECTED",
  "RUNNING",
  "SUCCEEDED",
  "FAILED",
  "CANCELLED"
)
export type SubmitState = typeof SubmitState.Type

export const Progress = Schema.Int.pipe(Schema.between(0, 100))

/** Stable public error codes: what a browser may see instead of a provider's raw error. */
export const PublicErrorCode = Schema.Literal(
  "provider_failed",
  "content_rejected",
  "invalid_input",
  "provider_unavailable",
  "timed_out",
  "output_unavailable",
  "canceled_by_provider",
  "internal_error"
)
export type PublicErrorCode = typeof PublicErrorCode.Type

export class TaskSnapshot extends Schema.Class<TaskSnapshot>("TaskSnapshot")({
  id: TaskId,
  tenantId: TenantId,
  projectId: ProjectId,
  userId: UserId,
  status: TaskStatus,
  stage: Stage,
  progress: Schema.NullOr(Progress),
  version: Schema.NonNegativeInt,
  currentAttemptId: Schema.NullOr(AttemptId),
  homeRegion: Schema.String,
  writeEpoch: Schema.NonNegativeInt,
  assetId: Schema.NullOr(Schema.String),
  errorCode: Schema.NullOr(PublicErrorCode),
  lastCursor: EventCursor,
  createdAt: Schema.Date,
  updatedAt: Schema.Date,
  terminalAt: Schema.NullOr(Schema.Date)
}) {}

export class AttemptSnapshot extends Schema.Class<AttemptSnapshot>("AttemptSnapshot")({
  id: AttemptId,
  taskId: TaskId,
  attemptNo: Schema.Int.pipe(Schema.positive()),
  provider: ProviderName,
  model: Schema.String,
  clientRequestId: Schema.String,
  providerTaskId: Schema.NullOr(Schema.String),
  submitState: SubmitState,
  lastProviderSeq: Schema.NullOr(Schema.Int),
  lastProviderAt: Schema.NullOr(Schema.Date),
  unknownSince: Schema.NullOr(Schema.Date),
  submitStartedAt: Schema.NullOr(Schema.Date),
  /** Until when the provider keeps the output downloadable: output work is ordered by it. */
  outputDeadlineAt: Schema.NullOr(Schema.Date),
  /** Temporary provider output locations: internal only, never in a public payload. */
  outputRefs: Schema.Array(Schema.String)
}) {}
