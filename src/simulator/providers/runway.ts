import * as HttpRouter from "@effect/platform/HttpRouter"
import type { TaskRetrieveResponse } from "@runwayml/sdk/resources/tasks"
import { Either, Schema } from "effect"
import {
  decodeStrict,
  outcomeOf,
  outputUrl,
  type Refused,
  type SimulatedProvider,
  type Validate
} from "../SimulatedProvider.js"
import type { Job, Phase } from "../SimulatorState.js"

export const RUNWAY_VERSION = "2024-11-06"

const promptText = Schema.String.pipe(Schema.minLength(1), Schema.maxLength(1000))
const TextToVideo = Schema.Union(
  Schema.Struct({
    model: Schema.Literal("gen4.5"),
    promptText,
    ratio: Schema.Literal("1280:720", "720:1280"),
    duration: Schema.Int.pipe(Schema.between(2, 10)),
    seed: Schema.optional(Schema.Int)
  }),
  Schema.Struct({
    model: Schema.Literal("veo3.1", "veo3.1_fast"),
    promptText,
    ratio: Schema.Literal("1280:720", "720:1280", "1080:1920", "1920:1080"),
    duration: Schema.optional(Schema.Literal(4, 6, 8)),
    audio: Schema.optional(Schema.Boolean),
    seed: Schema.optional(Schema.Int)
  })
)
/** image_to_video, which our old client called: it needs a promptImage, a ratio, and 5 or 10 s. */
const ImageToVideo = Schema.Struct({
  model: Schema.Literal("gen4_turbo", "gen3a_turbo"),
  promptImage: Schema.Union(Schema.String, Schema.Array(Schema.Unknown)),
  promptText: Schema.optional(Schema.String),
  ratio: Schema.String,
  duration: Schema.optional(Schema.Literal(5, 10)),
  seed: Schema.optional(Schema.Int)
})

const refuse = (error: string): Refused => ({ status: 400, body: { error, issues: [{ message: error }] } })

const validate = (endpoint: "text_to_video" | "image_to_video"): Validate => (i) =>
  i.headers["x-runway-version"] !== RUNWAY_VERSION
    ? Either.left(refuse(`X-Runway-Version header must be ${RUNWAY_VERSION}`))
    : Either.map(
      endpoint === "text_to_video"
        ? decodeStrict(TextToVideo, i.body, refuse) as Either.Either<{ readonly model: string }, Refused>
        : decodeStrict(ImageToVideo, i.body, refuse),
      (b) => ({ model: b.model, webhookUrl: null })
    )

const render = (job: Job, phase: Phase): TaskRetrieveResponse => {
  const createdAt = new Date(job.createdAt).toISOString()
  const estimatedCost = { credits: 40 }
  const cost = { credits: 40 }
  const done = outcomeOf(phase)
  return phase._tag === "queued"
    ? { id: job.id, createdAt, estimatedCost, status: "PENDING" }
    : phase._tag === "running"
    ? { id: job.id, createdAt, estimatedCost, status: "RUNNING", progress: phase.progress / 100 }
    : done === "succeeded"
    ? { id: job.id, createdAt, cost, status: "SUCCEEDED", output: [outputUrl(job)] }
    : done === "failed"
    ? { id: job.id, createdAt, cost, status: "FAILED", failure: "generation failed", failureCode: "INTERNAL" }
    : { id: job.id, createdAt, cost, status: "CANCELLED" }
}

/** Runway: polling only (no webhooks); every request names the API version. */
export const runway: SimulatedProvider = {
  name: "runway",
  jobId: () => crypto.randomUUID(),
  render,
  webhook: () => null,
  cancelAnswersEmpty: true,
  routes: (api) =>
    HttpRouter.empty.pipe(
      HttpRouter.post(
        "/runway/v1/text_to_video",
        api.submit({ validate: validate("text_to_video"), respond: (j) => ({ id: j.id }) })
      ),
      HttpRouter.post(
        "/runway/v1/image_to_video",
        api.submit({ validate: validate("image_to_video"), respond: (j) => ({ id: j.id }) })
      ),
      HttpRouter.get("/runway/v1/tasks/:id", api.job()),
      HttpRouter.del("/runway/v1/tasks/:id", api.cancel)
    )
}
