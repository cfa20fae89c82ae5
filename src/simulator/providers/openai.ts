import * as HttpRouter from "@effect/platform/HttpRouter"
import { Either, Schema } from "effect"
import type { Video } from "openai/resources/videos"
import {
  decodeStrict,
  outcomeOf,
  type Refused,
  type SimulatedProvider,
  standardHeaders,
  type Validate
} from "../SimulatedProvider.js"
import type { Job, Phase } from "../SimulatorState.js"

// the multipart fields of the SDK's VideoCreateParams; errors are { error: { message, type, param, code } }, 400
const Create = Schema.Struct({
  prompt: Schema.String.pipe(Schema.minLength(1)),
  model: Schema.optional(Schema.Literal("sora-2", "sora-2-pro")),
  seconds: Schema.optional(Schema.Literal("4", "8", "12")),
  size: Schema.optional(Schema.Literal("720x1280", "1280x720", "1024x1792", "1792x1024"))
})

const refuse = (message: string): Refused => ({
  status: 400,
  body: { error: { message, type: "invalid_request_error", param: null, code: "invalid_value" } }
})

const validate: Validate = (i) =>
  Either.flatMap(decodeStrict(Create, i.body, refuse), (b) => {
    const model = b.model ?? "sora-2"
    // sora-2 makes 720p only; the 1024x1792 / 1792x1024 sizes are sora-2-pro's
    return model === "sora-2" && (b.size === "1024x1792" || b.size === "1792x1024")
      ? Either.left(refuse(`size ${b.size} is not supported by ${model}`))
      : Either.right({ model, webhookUrl: i.accountWebhookUrl })
  })

const render = (job: Job, phase: Phase, now: number) => {
  const done = outcomeOf(phase)
  return {
    id: job.id,
    object: "video",
    model: job.model,
    status: phase._tag === "queued" ? "queued" : phase._tag === "running" ? "in_progress" : done === "succeeded"
      ? "completed"
      : "failed",
    progress: phase._tag === "running" ? phase.progress : done === "succeeded" ? 100 : 0,
    error: done !== null && done !== "succeeded"
      ? { code: done === "canceled" ? "canceled" : "generation_failed", message: done }
      : null,
    created_at: Math.floor(job.createdAt / 1000),
    completed_at: done ? Math.floor(now / 1000) : null,
    expires_at: null,
    prompt: null,
    remixed_from_video_id: null,
    seconds: "4",
    size: "1280x720"
  } satisfies Video
}

/** OpenAI Videos: webhooks only at the end (video.completed / video.failed), to the account's endpoint. */
export const openai: SimulatedProvider = {
  name: "openai",
  jobId: () => `video_${crypto.randomUUID()}`,
  render,
  webhook: (job, phase, signers, seq) => {
    if (job.webhookUrl === null || phase._tag !== "done" || phase.outcome === "canceled") return null
    const body = JSON.stringify({
      id: `evt_${job.id}_${phase.outcome}`,
      object: "event",
      created_at: Math.floor(Date.now() / 1000),
      type: phase.outcome === "succeeded" ? "video.completed" : "video.failed",
      data: { id: job.id }
    })
    return { url: job.webhookUrl, body, headers: standardHeaders(signers.openaiSecret, `msg_${job.id}_${seq}`, body) }
  },
  cancelAnswersEmpty: false,
  routes: (api) =>
    HttpRouter.empty.pipe(
      HttpRouter.post(
        "/openai/v1/videos",
        api.submit({ validate, status: 200 })
      ),
      HttpRouter.get("/openai/v1/videos/:id", api.job()),
      HttpRouter.del("/openai/v1/videos/:id", api.cancel),
      HttpRouter.get("/openai/v1/videos/:id/content", api.video)
    )
}
