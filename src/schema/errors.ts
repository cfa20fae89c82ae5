import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import { Schema } from "effect"
import { TaskId } from "./ids.js"

export class TaskNotFound extends Schema.TaggedError<TaskNotFound>()(
  "TaskNotFound",
  { taskId: Schema.String },
  HttpApiSchema.annotations({ status: 404 })
) {
  override get message() {
    return `task ${this.taskId} not found`
  }
}

/** The write fence refused the write: this runner's region/epoch is not the active one, or the mode forbids writes. */
export class WriteFenced extends Schema.TaggedError<WriteFenced>()(
  "WriteFenced",
  {
    reason: Schema.String,
    /** The system mode that refused it (seed 19.5.5), when a mode did (null: the region or epoch). */
    mode: Schema.optionalWith(Schema.NullOr(Schema.String), { default: () => null })
  },
  HttpApiSchema.annotations({ status: 503 })
) {
  override get message() {
    return this.reason
  }
}

/** The version CAS kept failing after reloads: another writer keeps winning (should not happen under sharding). */
export class VersionConflict extends Schema.TaggedError<VersionConflict>()(
  "VersionConflict",
  { taskId: TaskId, expected: Schema.Number },
  HttpApiSchema.annotations({ status: 409 })
) {}

/** The same Idempotency-Key was used with a different request body. */
export class IdempotencyKeyReused extends Schema.TaggedError<IdempotencyKeyReused>()(
  "IdempotencyKeyReused",
  { message: Schema.String },
  HttpApiSchema.annotations({ status: 422 })
) {}

export class CommandRejected extends Schema.TaggedError<CommandRejected>()(
  "CommandRejected",
  { message: Schema.String },
  HttpApiSchema.annotations({ status: 409 })
) {}

export class Unauthorized extends Schema.TaggedError<Unauthorized>()(
  "Unauthorized",
  { message: Schema.String },
  HttpApiSchema.annotations({ status: 401 })
) {}

/** The database could not be reached or failed: the caller should retry later; nothing was acknowledged. */
export class StorageUnavailable extends Schema.TaggedError<StorageUnavailable>()(
  "StorageUnavailable",
  { message: Schema.String },
  HttpApiSchema.annotations({ status: 503 })
) {}

export class ProjectNotFound extends Schema.TaggedError<ProjectNotFound>()(
  "ProjectNotFound",
  { projectId: Schema.String },
  HttpApiSchema.annotations({ status: 404 })
) {
  override get message() {
    return `project ${this.projectId} not found`
  }
}

/** The task's entity could not be reached in time (shard moving, runner stopping): retry shortly. */
export class TaskUnavailable extends Schema.TaggedError<TaskUnavailable>()(
  "TaskUnavailable",
  { message: Schema.String },
  HttpApiSchema.annotations({ status: 503 })
) {}

/** New tasks are throttled: the outbox backlog is past its watermark (the event queue is down or slow, seed 19.3.5). */
export class AdmissionsThrottled extends Schema.TaggedError<AdmissionsThrottled>()(
  "AdmissionsThrottled",
  { message: Schema.String },
  HttpApiSchema.annotations({ status: 503 })
) {}

/** The provider would refuse this request (a model it does not offer, a duration it cannot make): not admitted. */
export class UnsupportedRequest extends Schema.TaggedError<UnsupportedRequest>()(
  "UnsupportedRequest",
  { message: Schema.String },
  HttpApiSchema.annotations({ status: 422 })
) {}

/** A request body over the API's size limit (API_MAX_BODY_BYTES): refused while it streams in, never buffered whole. */
export class PayloadTooLarge extends Schema.TaggedError<PayloadTooLarge>()(
  "PayloadTooLarge",
  { message: Schema.String },
  HttpApiSchema.annotations({ status: 413 })
) {}

/** The tenant already has as many projects as it may (PROJECTS_PER_TENANT). */
export class ProjectLimitReached extends Schema.TaggedError<ProjectLimitReached>()(
  "ProjectLimitReached",
  { message: Schema.String, limit: Schema.Int },
  HttpApiSchema.annotations({ status: 403 })
) {}

/** The credential is valid but does not allow this (a token scoped to some projects cannot create more). */
export class Forbidden extends Schema.TaggedError<Forbidden>()(
  "Forbidden",
  { message: Schema.String },
  HttpApiSchema.annotations({ status: 403 })
) {}

/** An operator's request that cannot be carried out as asked (a mode without its providers, a task not in review). */
export class OperationRefused extends Schema.TaggedError<OperationRefused>()(
  "OperationRefused",
  { message: Schema.String },
  HttpApiSchema.annotations({ status: 409 })
) {}

/** What an operator named does not exist (an inbox row, a dead letter, a reconciliation). */
export class NotFound extends Schema.TaggedError<NotFound>()(
  "NotFound",
  { message: Schema.String },
  HttpApiSchema.annotations({ status: 404 })
) {}
