import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { SystemMode } from "../../domain/systemModes.js"
import {
  NotFound,
  OperationRefused,
  StorageUnavailable,
  TaskNotFound,
  TaskUnavailable,
  VersionConflict,
  WriteFenced
} from "../../schema/errors.js"
import { ProjectId, TaskId } from "../../schema/ids.js"
import { OperatorAuthentication } from "./OperatorAuth.js"

/** Why an operator acts: written into the audit row, so it may not be empty. */
const Reason = Schema.Trim.pipe(Schema.minLength(1), Schema.maxLength(500))

export class ModeView extends Schema.Class<ModeView>("ModeView")({
  mode: SystemMode,
  active_region: Schema.String,
  write_epoch: Schema.Int,
  updated_at: Schema.Date,
  degraded_providers: Schema.Array(Schema.String)
}) {}

export class SetModeBody extends Schema.Class<SetModeBody>("SetModeBody")({
  mode: SystemMode,
  reason: Reason,
  /** DEGRADED_PROVIDER: the providers whose submissions pause (required then, refused otherwise) */
  providers: Schema.optional(Schema.Array(Schema.String.pipe(Schema.pattern(/^[a-z0-9_-]{1,40}$/))))
}) {}

export class BumpEpochBody extends Schema.Class<BumpEpochBody>("BumpEpochBody")({
  region: Schema.String.pipe(Schema.pattern(/^[A-Za-z0-9_.-]{1,64}$/)),
  reason: Reason
}) {}

/** New stream epochs (after a point-in-time restore): every project's, or `project_id`'s only. */
export class NewStreamEpochBody extends Schema.Class<NewStreamEpochBody>("NewStreamEpochBody")({
  project_id: Schema.optional(ProjectId),
  reason: Reason
}) {}

export class StreamEpochChange extends Schema.Class<StreamEpochChange>("StreamEpochChange")({
  project_id: Schema.String,
  from_epoch: Schema.Int,
  to_epoch: Schema.Int
}) {}

export class StreamEpochsView extends Schema.Class<StreamEpochsView>("StreamEpochsView")({
  /** how many project streams got a new epoch */
  bumped: Schema.Int,
  /** the first 100 of them, by project id */
  projects: Schema.Array(StreamEpochChange)
}) {}

export class AuditChange extends Schema.Class<AuditChange>("AuditChange")({
  at: Schema.Date,
  operator: Schema.String,
  what: Schema.String,
  from: Schema.NullOr(Schema.String),
  to: Schema.NullOr(Schema.String),
  reason: Schema.String
}) {}

export class AuditView extends Schema.Class<AuditView>("AuditView")({ changes: Schema.Array(AuditChange) }) {}

export class OutboxView extends Schema.Class<OutboxView>("OutboxView")({
  backlog: Schema.Int,
  oldest_age_seconds: Schema.NullOr(Schema.Number)
}) {}

export class InboxRowView extends Schema.Class<InboxRowView>("InboxRowView")({
  id: Schema.Int,
  provider: Schema.String,
  received_at: Schema.Date,
  attempts: Schema.Int,
  error: Schema.NullOr(Schema.String)
}) {}

export class InboxRowsView extends Schema.Class<InboxRowsView>("InboxRowsView")({ rows: Schema.Array(InboxRowView) }) {}

export class InboxReplayBody extends Schema.Class<InboxReplayBody>("InboxReplayBody")({
  id: Schema.Union(Schema.Literal("all"), Schema.String.pipe(Schema.pattern(/^[0-9]{1,18}$/))),
  which: Schema.Literal("dead", "orphans")
}) {}

export class Replayed extends Schema.Class<Replayed>("Replayed")({ replayed: Schema.Int }) {}

export class DeadLetterView extends Schema.Class<DeadLetterView>("DeadLetterView")({
  id: Schema.Int,
  event_id: Schema.String,
  task_id: Schema.String,
  attempts: Schema.Int,
  error: Schema.String,
  created_at: Schema.Date
}) {}

export class DeadLettersView extends Schema.Class<DeadLettersView>("DeadLettersView")({
  rows: Schema.Array(DeadLetterView)
}) {}

export class DeadLettersReplayBody extends Schema.Class<DeadLettersReplayBody>("DeadLettersReplayBody")({
  id: Schema.Union(Schema.Literal("all"), Schema.Int.pipe(Schema.positive()))
}) {}

export class ReviewTask extends Schema.Class<ReviewTask>("ReviewTask")({
  task_id: Schema.String,
  tenant_id: Schema.String,
  project_id: Schema.String,
  provider: Schema.NullOr(Schema.String),
  status: Schema.String,
  since: Schema.Date,
  reason: Schema.String
}) {}

export class ReviewView extends Schema.Class<ReviewView>("ReviewView")({
  tasks: Schema.Array(ReviewTask),
  /** pass as `cursor` for the next page; null: this was the last */
  next_cursor: Schema.NullOr(Schema.String)
}) {}

export const ReviewQuery = Schema.Struct({
  cursor: Schema.optional(Schema.String.pipe(Schema.maxLength(200))),
  limit: Schema.optional(Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 500)))
})

export class ResolveReviewBody extends Schema.Class<ResolveReviewBody>("ResolveReviewBody")({
  as: Schema.Literal("ready", "failed", "canceled"),
  reason: Reason
}) {}

export class ResolvedTask extends Schema.Class<ResolvedTask>("ResolvedTask")({
  task_id: Schema.String,
  status: Schema.String,
  version: Schema.Int
}) {}

export class ReconciliationView extends Schema.Class<ReconciliationView>("ReconciliationView")({
  id: Schema.Int,
  task_id: Schema.String,
  attempt_id: Schema.NullOr(Schema.String),
  reason: Schema.String,
  created_at: Schema.Date
}) {}

export class ReconciliationsView extends Schema.Class<ReconciliationsView>("ReconciliationsView")({
  rows: Schema.Array(ReconciliationView)
}) {}

export class ResolveReconciliationBody extends Schema.Class<ResolveReconciliationBody>("ResolveReconciliationBody")({
  reason: Reason
}) {}

const taskParam = HttpApiSchema.param("task", TaskId)
const idParam = HttpApiSchema.param("id", Schema.NumberFromString.pipe(Schema.int(), Schema.positive()))

/** System mode and write epoch, inbox and dead letters, manual review and reconciliations. */
export class OperationsApi extends HttpApiGroup.make("operations")
  .add(HttpApiEndpoint.get("getMode", "/admin/mode").addSuccess(ModeView).addError(StorageUnavailable))
  .add(
    HttpApiEndpoint.put("setMode", "/admin/mode").setPayload(SetModeBody).addSuccess(ModeView)
      .addError(OperationRefused).addError(StorageUnavailable)
  )
  .add(
    HttpApiEndpoint.post("bumpEpoch", "/admin/epoch/bump").setPayload(BumpEpochBody).addSuccess(ModeView)
      .addError(StorageUnavailable)
  )
  .add(
    HttpApiEndpoint.post("newStreamEpoch", "/admin/streams/new-epoch").setPayload(NewStreamEpochBody)
      .addSuccess(StreamEpochsView).addError(NotFound).addError(StorageUnavailable)
  )
  .add(HttpApiEndpoint.get("audit", "/admin/audit").addSuccess(AuditView).addError(StorageUnavailable))
  .add(HttpApiEndpoint.get("outbox", "/admin/outbox").addSuccess(OutboxView).addError(StorageUnavailable))
  .add(HttpApiEndpoint.get("inboxDead", "/admin/inbox/dead").addSuccess(InboxRowsView).addError(StorageUnavailable))
  .add(
    HttpApiEndpoint.get("inboxOrphans", "/admin/inbox/orphans").addSuccess(InboxRowsView)
      .addError(StorageUnavailable)
  )
  .add(
    HttpApiEndpoint.post("inboxReplay", "/admin/inbox/replay").setPayload(InboxReplayBody).addSuccess(Replayed)
      .addError(NotFound).addError(StorageUnavailable)
  )
  .add(
    HttpApiEndpoint.get("deadLetters", "/admin/dead-letters").addSuccess(DeadLettersView)
      .addError(StorageUnavailable)
  )
  .add(
    HttpApiEndpoint.post("deadLettersReplay", "/admin/dead-letters/replay").setPayload(DeadLettersReplayBody)
      .addSuccess(Replayed).addError(NotFound).addError(StorageUnavailable)
  )
  .add(
    HttpApiEndpoint.get("review", "/admin/review").setUrlParams(ReviewQuery).addSuccess(ReviewView)
      .addError(OperationRefused).addError(StorageUnavailable)
  )
  .add(
    HttpApiEndpoint.post("resolveReview")`/admin/review/${taskParam}/resolve`.setPayload(ResolveReviewBody)
      .addSuccess(ResolvedTask)
      .addError(TaskNotFound)
      .addError(OperationRefused)
      .addError(WriteFenced)
      .addError(VersionConflict)
      .addError(TaskUnavailable)
      .addError(StorageUnavailable)
  )
  .add(
    HttpApiEndpoint.get("reconciliations", "/admin/reconciliations").addSuccess(ReconciliationsView)
      .addError(StorageUnavailable)
  )
  .add(
    HttpApiEndpoint.post("resolveReconciliation")`/admin/reconciliations/${idParam}/resolve`
      .setPayload(ResolveReconciliationBody)
      .addSuccess(Schema.Void, { status: 204 })
      .addError(NotFound)
      .addError(StorageUnavailable)
  )
  .middleware(OperatorAuthentication)
  .annotate(OpenApi.Description, "Modes, epochs, dead letters, manual review (operator token)")
{}
