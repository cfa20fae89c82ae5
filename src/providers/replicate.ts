import { Schema } from "effect"
import { parseWith, type ProviderReport, type WebhookProtocol } from "./ProviderAdapter.js"

/** A Replicate prediction: the webhook body and the GET /v1/predictions/{id} response are the same object. */
export const ReplicatePrediction = Schema.Struct({
  id: Schema.String,
  status: Schema.Literal("starting", "processing", "succeeded", "failed", "canceled", "aborted"),
  output: Schema.optional(Schema.Unknown),
  error: Schema.optional(Schema.NullOr(Schema.Unknown)),
  completed_at: Schema.optional(Schema.NullOr(Schema.String)),
  created_at: Schema.optional(Schema.NullOr(Schema.String))
})

const outputUrls = (output: unknown): ReadonlyArray<string> =>
  typeof output === "string"
    ? [output]
    : Array.isArray(output)
    ? output.filter((x): x is string => typeof x === "string")
    : []

export const replicateReport = (p: typeof ReplicatePrediction.Type): ProviderReport => ({
  providerTaskId: p.id,
  clientRequestId: null,
  eventType: `prediction.${p.status}`,
  providerUpdatedAt: p.completed_at ? new Date(p.completed_at) : null,
  providerSequence: null,
  status: p.status === "starting" || p.status === "processing"
    ? "running"
    : p.status === "succeeded"
    ? "succeeded"
    : p.status === "canceled"
    ? "canceled"
    : "failed",
  stage: p.status === "starting" ? "starting" : p.status === "processing" ? "generating" : null,
  progress: null,
  errorClass: p.status === "failed" || p.status === "aborted" ? "provider_failed" : null,
  errorCode: p.status === "aborted" ? "aborted" : p.error ? "prediction_error" : null,
  outputRefs: p.status === "succeeded" ? outputUrls(p.output) : []
})

export const replicateWebhooks: WebhookProtocol = {
  scheme: "standard-webhooks",
  parse: parseWith(ReplicatePrediction, replicateReport)
}
