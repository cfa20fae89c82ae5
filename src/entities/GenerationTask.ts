import { Entity } from "@effect/cluster"
import { Rpc } from "@effect/rpc"
import { Schema } from "effect"
import { StorageUnavailable, TaskNotFound, VersionConflict, WriteFenced } from "../schema/errors.js"
import { AttemptId } from "../schema/ids.js"
import { ProviderObservation } from "../schema/observation.js"
import { TaskSnapshot } from "../schema/task.js"

export const OutcomeKind = Schema.Literal("changed", "unchanged", "ignored", "conflict")

export class CommandResult extends Schema.Class<CommandResult>("CommandResult")({
  outcome: OutcomeKind,
  reason: Schema.NullOr(Schema.String),
  task: TaskSnapshot
}) {}

const ReadErrors = Schema.Union(TaskNotFound, StorageUnavailable)
const WriteErrors = Schema.Union(TaskNotFound, WriteFenced, VersionConflict, StorageUnavailable)

/**
 * The single writer of one generation task, keyed by task id.
 *
 * Every Rpc is volatile (not persisted in cluster MessageStorage), deliberately:
 * - Observe: the provider_callback_inbox row (webhooks) or the poller's own schedule in task_attempts (polls)
 *   is the durable record; the sender re-drives until the entity has answered. A persisted message would
 *   be a second durable write per observation (~600/s persisted vs ~2,000/s volatile measured here).
 * - Recheck: likewise re-driven from its inbox row. An unsigned callback claimed an outcome: the attempt is polled
 *   now, and the provider's answer, not the claim, is applied.
 * - Start / Cancel: the HTTP API answers only after the entity replied, so the client's retry (idempotent by
 *   task state) is the re-drive; a lost Start is picked up by the sweeper from the task row.
 * - Resolve: an operator's decision on a task in manual_review; the operator's retry is the re-drive, and the step
 *   is idempotent by task state (a second one finds the task no longer in review).
 * - GetSnapshot: a read.
 * Background work the entity owns (the poller, later) is restarted by its build from durable state.
 */
export const GenerationTask = Entity.make("GenerationTask", [
  Rpc.make("Start", {
    // granted: the waking runner took a quota slot for the task's next poll (ParkedTasks.ts)
    payload: { traceId: Schema.String, granted: Schema.optional(Schema.Boolean) },
    success: TaskSnapshot,
    error: ReadErrors
  }),
  Rpc.make("Observe", {
    // the class's own schema without its `make`: the Rpc client calls a payload schema's `make` on every send, and
    // the class's validates the whole observation again (UUIDs, dates, literals), though every sender holds one it
    // built with `new ProviderObservation` (validated then). Sent to another runner it is encoded and decoded by
    // the same schema as before
    payload: ProviderObservation.annotations({}),
    success: CommandResult,
    error: WriteErrors
  }),
  Rpc.make("Recheck", {
    payload: { attemptId: AttemptId, traceId: Schema.String },
    error: ReadErrors
  }),
  Rpc.make("Cancel", {
    payload: { traceId: Schema.String },
    success: CommandResult,
    error: WriteErrors
  }),
  Rpc.make("Resolve", {
    payload: {
      as: Schema.Literal("ready", "failed", "canceled"),
      operator: Schema.String,
      reason: Schema.String,
      traceId: Schema.String
    },
    success: CommandResult,
    error: WriteErrors
  }),
  Rpc.make("GetSnapshot", {
    success: TaskSnapshot,
    error: ReadErrors
  })
])
