import { Schema } from "effect"
import { parseWith, type ProviderReport, type WebhookProtocol } from "./ProviderAdapter.js"

/** fal.ai queue status: GET .../requests/{id}/status. */
export const FalStatus = Schema.Struct({
  status: Schema.Literal("IN_QUEUE", "IN_PROGRESS", "COMPLETED"),
  request_id: Schema.optional(Schema.String),
  queue_position: Schema.optional(Schema.Number)
})

/** fal.ai webhook body: status OK | ERROR with the result payload or an error. */
const FalWebhook = Schema.Struct({
  request_id: Schema.String,
  status: Schema.Literal("OK", "ERROR"),
  payload: Schema.optional(Schema.NullOr(Schema.Unknown)),
  error: Schema.optional(Schema.NullOr(Schema.String))
})

/** fal video apps return `{ video: { url } }` (some `{ videos: [{ url }] }`). */
export const falOutputUrls = (payload: unknown): ReadonlyArray<string> => {
  if (typeof payload !== "object" || payload === null) return []
  const p = payload as { video?: { url?: unknown }; videos?: ReadonlyArray<{ url?: unknown }> }
  const urls = [p.video?.url, ...(p.videos ?? []).map((v) => v.url)]
  return urls.filter((u): u is string => typeof u === "string")
}

export const falStatusReport = (requestId: string, s: typeof FalStatus.Type): ProviderReport => ({
  providerTaskId: requestId,
  clientRequestId: null,
  eventType: `status.${s.status}`,
  providerUpdatedAt: null,
  providerSequence: null,
  // COMPLETED says the request ended, not how: the result (GET .../requests/{id}) decides success
  status: s.status === "IN_QUEUE" ? "queued" : "running",
  stage: s.status === "IN_PROGRESS" ? "generating" : null,
  progress: null,
  errorClass: null,
  errorCode: null,
  outputRefs: []
})

export const falWebhooks: WebhookProtocol = {
  scheme: "fal-ed25519",
  parse: parseWith(FalWebhook, (w): ProviderReport => ({
    providerTaskId: w.request_id,
    clientRequestId: null,
    eventType: `webhook.${w.status}`,
    providerUpdatedAt: null,
    providerSequence: null,
    status: w.status === "OK" ? "succeeded" : "failed",
    stage: null,
    progress: null,
    errorClass: w.status === "ERROR" ? "provider_failed" : null,
    errorCode: w.status === "ERROR" ? "fal_error" : null,
    outputRefs: w.status === "OK" ? falOutputUrls(w.payload) : []
  }))
}
