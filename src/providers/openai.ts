import { Schema } from "effect"
import { parseWith, percent, type ProviderReport, type WebhookProtocol } from "./ProviderAdapter.js"

/** OpenAI Videos: GET /videos/{id} → { id, status, progress, error } (queued | in_progress | completed | failed). */
export const OpenAIVideo = Schema.Struct({
  id: Schema.String,
  status: Schema.Literal("queued", "in_progress", "completed", "failed"),
  progress: Schema.optional(Schema.NullOr(Schema.Number)),
  error: Schema.optional(Schema.NullOr(Schema.Struct({ code: Schema.optional(Schema.String) }))),
  completed_at: Schema.optional(Schema.NullOr(Schema.Number))
})

/** Webhook events video.completed / video.failed, signed per Standard Webhooks. */
const OpenAIEvent = Schema.Struct({
  id: Schema.String,
  type: Schema.Literal("video.completed", "video.failed"),
  created_at: Schema.Number,
  data: Schema.Struct({ id: Schema.String })
})

export const openaiVideoReport = (v: typeof OpenAIVideo.Type): ProviderReport => ({
  providerTaskId: v.id,
  clientRequestId: null,
  eventType: `video.${v.status}`,
  providerUpdatedAt: v.completed_at ? new Date(v.completed_at * 1000) : null,
  providerSequence: null,
  status: v.status === "queued"
    ? "queued"
    : v.status === "in_progress"
    ? "running"
    : v.status === "completed"
    ? "succeeded"
    : "failed",
  stage: v.status === "in_progress" ? "generating" : null,
  progress: percent(v.progress),
  errorClass: v.status === "failed" ? "provider_failed" : null,
  errorCode: v.error?.code ?? null,
  // the MP4 is GET /videos/{id}/content: fetched by the output step with our credentials, not a public URL
  outputRefs: v.status === "completed" ? [`openai:video:${v.id}`] : []
})

export const openaiWebhooks: WebhookProtocol = {
  scheme: "standard-webhooks",
  parse: parseWith(OpenAIEvent, (e): ProviderReport => ({
    providerTaskId: e.data.id,
    clientRequestId: null,
    eventType: e.type,
    providerUpdatedAt: new Date(e.created_at * 1000),
    providerSequence: null,
    status: e.type === "video.completed" ? "succeeded" : "failed",
    stage: null,
    progress: null,
    errorClass: e.type === "video.failed" ? "provider_failed" : null,
    errorCode: null,
    outputRefs: e.type === "video.completed" ? [`openai:video:${e.data.id}`] : []
  }))
}
