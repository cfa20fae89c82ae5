import { Schema } from "effect"
import { AttemptId, ProviderName } from "./ids.js"
import { Progress, Stage } from "./task.js"

/** The stages a provider can report; later stages belong to the platform's own output pipeline. */
export const providerStages: ReadonlySet<Stage> = new Set(["provider_queued", "starting", "generating", "generated"])

export const NormalizedStatus = Schema.Literal("queued", "running", "succeeded", "failed", "canceled")
export type NormalizedStatus = typeof NormalizedStatus.Type

export const ObservationSource = Schema.Literal("webhook", "poll", "reconcile")
export type ObservationSource = typeof ObservationSource.Type

/** Provider error classes (seed 12.8.4); the public code a browser sees is derived from them. */
export const ErrorClass = Schema.Literal(
  "provider_failed",
  "content_rejected",
  "invalid_input",
  "timed_out",
  "canceled_by_provider"
)
export type ErrorClass = typeof ErrorClass.Type

/**
 * What one callback or one poll says about one provider job (seed 12.5.1), after the adapter has
 * normalized it. Webhooks and polls produce the same type and go through the same transition function.
 */
export class ProviderObservation extends Schema.Class<ProviderObservation>("ProviderObservation")({
  provider: ProviderName,
  providerEventId: Schema.NullOr(Schema.String),
  dedupKey: Schema.String,
  providerTaskId: Schema.NullOr(Schema.String),
  clientRequestId: Schema.NullOr(Schema.String),
  attemptId: AttemptId,
  providerSequence: Schema.NullOr(Schema.Int),
  providerOccurredAt: Schema.NullOr(Schema.Date),
  receivedAt: Schema.Date,
  status: NormalizedStatus,
  stage: Schema.NullOr(Stage.pipe(Schema.filter((s) => providerStages.has(s), {
    message: () => "a provider observation may only carry a provider stage"
  }))),
  progress: Schema.NullOr(Progress),
  errorClass: Schema.NullOr(ErrorClass),
  /** The provider's own error code: kept for audit, never published. */
  errorCode: Schema.NullOr(Schema.String),
  outputRefs: Schema.Array(Schema.String),
  source: ObservationSource,
  payloadHash: Schema.String,
  traceId: Schema.String
}) {}
