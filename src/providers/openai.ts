import type * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import { Effect, Either, Option, Schema } from "effect"
import type { Video, VideoCreateParams, VideoSeconds, VideoSize } from "openai/resources/videos"
import { parseWith, percent, type ProviderReport, validDate, type WebhookProtocol } from "./ProviderAdapter.js"
import { constant, type ProviderDefinition, type Resolution } from "./ProviderDefinition.js"
import { allowed, atLeast, refuseUnless } from "./transport.js"
import { standardWebhooks } from "./webhookVerifiers.js"

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
  providerUpdatedAt: v.completed_at ? validDate(new Date(v.completed_at * 1000)) : null,
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
    providerUpdatedAt: validDate(new Date(e.created_at * 1000)),
    providerSequence: null,
    status: e.type === "video.completed" ? "succeeded" : "failed",
    stage: null,
    progress: null,
    errorClass: e.type === "video.failed" ? "provider_failed" : null,
    errorCode: null,
    outputRefs: e.type === "video.completed" ? [`openai:video:${e.data.id}`] : []
  }))
}

/** OpenAI Videos takes 4, 8 or 12 seconds, as a string. */
export const openaiSeconds = (seconds: number): Either.Either<VideoSeconds, string> =>
  Either.map(atLeast([4, 8, 12] as const)(seconds), (s) => String(s) as VideoSeconds)

const models = ["sora-2", "sora-2-pro"] as const
type Model = (typeof models)[number]

/** Landscape: sora-2 makes 1280x720 only; sora-2-pro also 1792x1024, which is what 1080p asks of it. */
const sizeOf = (model: Model, resolution: Resolution): VideoSize =>
  model === "sora-2-pro" && resolution === "1080p" ? "1792x1024" : "1280x720"

const openaiCheck = (model: string, seconds: number) =>
  (models as ReadonlyArray<string>).includes(model)
    ? Either.map(openaiSeconds(seconds), (s) => [model as Model, s] as const)
    : Either.left(`model ${model}: OpenAI Videos offers ${models.join(", ")}`)

/**
 * The SDK sends `POST /videos` as multipart form data (`multipartFormRequestOptions`), so we do too, with the
 * SDK's own field types: `satisfies VideoCreateParams` fails to compile if a field or a value drifts.
 */
export const openaiBody = (p: VideoCreateParams): FormData => {
  const form = new FormData()
  for (const [k, v] of Object.entries(p)) if (typeof v === "string") form.append(k, v)
  return form
}

export const openai: ProviderDefinition = {
  name: "openai",
  title: "OpenAI Videos",
  defaultBaseUrl: "https://api.openai.com",
  // the MP4 is served by the API itself (GET /videos/{id}/content)
  outputHosts: ["api.openai.com"],
  exampleModel: "sora-2",
  authHeaders: (key) => ({ authorization: `Bearer ${key}` }),
  check: (r) => allowed(openaiCheck(r.model, r.durationSeconds)),
  client: constant(({ transport }) => ({
    submit: (r) =>
      refuseUnless(openaiCheck(r.model, r.durationSeconds), ([model, seconds]) =>
        transport.submit(
          "/v1/videos",
          openaiBody(
            { model, prompt: r.prompt, seconds, size: sizeOf(model, r.resolution) } satisfies VideoCreateParams
          ),
          OpenAIVideo,
          (v) => v.id,
          r.clientRequestId
        )),
    query: (id) => Effect.map(transport.call("GET", `/v1/videos/${id}`, OpenAIVideo), (r) => openaiVideoReport(r.body)),
    // OpenAI has no cancel for a video job: DELETE removes the video (and stops paying for its storage)
    cancel: (id) => transport.send("DELETE", `/v1/videos/${id}`),
    // the MP4 is GET /videos/{id}/content with our key, not a public URL
    outputRequest: (ref) =>
      ref.startsWith("openai:video:")
        ? Option.some(transport.authorized(`/v1/videos/${ref.slice("openai:video:".length)}/content`))
        : Option.none<HttpClientRequest.HttpClientRequest>()
  })),
  webhook: { protocol: openaiWebhooks, verifier: standardWebhooks("OPENAI_WEBHOOK_SECRET", "OpenAI") }
}

/** Our schema reads a subset of the SDK's Video: a compile error here means the two drifted apart. */
export const openaiMatchesSdk: Video extends typeof OpenAIVideo.Encoded ? true : false = true
