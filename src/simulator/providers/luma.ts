import * as HttpRouter from "@effect/platform/HttpRouter"
import { Either, Schema } from "effect"
import type { Generation } from "lumaai/resources/generations/generations"
import { decodeStrict, outcomeOf, outputUrl, type SimulatedProvider, type Validate } from "../SimulatedProvider.js"
import type { Job, Phase } from "../SimulatorState.js"

// the SDK's GenerationCreateParams; 400 { detail }
const Create = Schema.Struct({
  model: Schema.Literal("ray-2", "ray-flash-2"),
  prompt: Schema.optional(Schema.String),
  generation_type: Schema.optional(Schema.Literal("video")),
  aspect_ratio: Schema.optional(Schema.Literal("1:1", "16:9", "9:16", "4:3", "3:4", "21:9", "9:21")),
  duration: Schema.optional(Schema.Literal("5s", "9s")),
  resolution: Schema.optional(Schema.Literal("540p", "720p", "1080p", "4k")),
  loop: Schema.optional(Schema.Boolean),
  callback_url: Schema.optional(Schema.String)
})

const validate: Validate = (i) =>
  Either.map(
    decodeStrict(Create, i.body, (detail) => ({ status: 400, body: { detail } })),
    (b) => ({ model: b.model, webhookUrl: b.callback_url ?? null })
  )

const render = (job: Job, phase: Phase) => {
  const done = outcomeOf(phase)
  return {
    id: job.id,
    generation_type: "video",
    model: job.model,
    state: phase._tag === "queued" ? "queued" : phase._tag === "running" ? "dreaming" : done === "succeeded"
      ? "completed"
      : "failed",
    ...(done !== null && done !== "succeeded" ? { failure_reason: done } : {}),
    ...(done === "succeeded" ? { assets: { video: outputUrl(job) } } : {}),
    created_at: new Date(job.createdAt).toISOString()
  } satisfies Generation
}

/** Luma: the whole generation, unsigned, to callback_url on every change. */
export const luma: SimulatedProvider = {
  name: "luma",
  jobId: () => crypto.randomUUID(),
  render,
  webhook: (job, phase) =>
    job.webhookUrl === null
      ? null
      : {
        url: job.webhookUrl,
        body: JSON.stringify(render(job, phase)),
        headers: { "content-type": "application/json" }
      },
  cancelAnswersEmpty: true,
  routes: (api) =>
    HttpRouter.empty.pipe(
      HttpRouter.post("/luma/dream-machine/v1/generations/video", api.submit({ validate })),
      HttpRouter.get("/luma/dream-machine/v1/generations/:id", api.job()),
      HttpRouter.del("/luma/dream-machine/v1/generations/:id", api.cancel)
    )
}
