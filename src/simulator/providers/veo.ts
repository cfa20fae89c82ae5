import * as HttpRouter from "@effect/platform/HttpRouter"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Effect, Either, Schema } from "effect"
import {
  decodeStrict,
  outcomeOf,
  type Refused,
  type SimApi,
  type SimulatedProvider,
  type Validate
} from "../SimulatedProvider.js"
import type { Job, Phase } from "../SimulatorState.js"

// Vertex's { instances: [{ prompt }], parameters }; Google's { error: { code, message, status } }
const Create = Schema.Struct({
  instances: Schema.Tuple(Schema.Struct({ prompt: Schema.String.pipe(Schema.minLength(1)) })),
  parameters: Schema.Struct({
    durationSeconds: Schema.Int,
    aspectRatio: Schema.optional(Schema.Literal("16:9", "9:16")),
    sampleCount: Schema.optional(Schema.Int.pipe(Schema.between(1, 4))),
    resolution: Schema.optional(Schema.Literal("720p", "1080p")),
    storageUri: Schema.optional(Schema.String.pipe(Schema.startsWith("gs://"))),
    generateAudio: Schema.optional(Schema.Boolean),
    negativePrompt: Schema.optional(Schema.String),
    seed: Schema.optional(Schema.Int)
  })
})

const refuse = (message: string, code = 400): Refused => ({
  status: code,
  body: { error: { code, message, status: code === 404 ? "NOT_FOUND" : "INVALID_ARGUMENT" } }
})

/** `i.model` is the model's full path; its last segment names the model. */
const validate: Validate = (i) => {
  const path = i.model ?? ""
  const model = path.split("/").at(-1) ?? ""
  const durations = model.startsWith("veo-2.") ? [5, 6, 7, 8] : model.startsWith("veo-3.") ? [4, 6, 8] : null
  if (durations === null) return Either.left(refuse(`Publisher model ${model} is not found`, 404))
  return Either.flatMap(
    decodeStrict(Create, i.body, (m) => refuse(m)),
    (b) =>
      !durations.includes(b.parameters.durationSeconds)
        ? Either.left(refuse(`durationSeconds must be one of ${durations.join(", ")} for ${model}`))
        : b.parameters.resolution !== undefined && model.startsWith("veo-2.")
        ? Either.left(refuse(`resolution is not supported by ${model}`))
        : Either.right({ model: path, webhookUrl: null })
  )
}

const render = (job: Job, phase: Phase) => {
  const done = outcomeOf(phase)
  return {
    name: job.id,
    done: done !== null,
    ...(done === "succeeded"
      ? {
        response: {
          "@type": "type.googleapis.com/cloud.ai.large_models.vision.GenerateVideoResponse",
          videos: [{ gcsUri: `gs://sim/veo-output/${encodeURIComponent(job.id)}.mp4`, mimeType: "video/mp4" }]
        }
      }
      : {}),
    ...(done !== null && done !== "succeeded" ? { error: { code: done === "canceled" ? 1 : 13, message: done } } : {})
  }
}

type Params = Readonly<Record<string, string | undefined>>
const modelPath = (p: Params) =>
  `projects/${p.project}/locations/${p.location}/publishers/google/models/${(p.call ?? "").split(":")[0]}`

/** {model}:predictLongRunning and {model}:fetchPredictOperation share one path pattern: the method picks. */
const dispatch = (api: SimApi) => {
  const submit = api.submit({ validate, status: 200, respond: (j) => ({ name: j.id }), modelOf: modelPath })
  const fetch = api.job({
    id: (_, body) => {
      const name = (body as { operationName?: unknown } | null)?.operationName
      return typeof name === "string" ? name : undefined
    },
    notFound: refuse("Operation is not found", 404)
  })
  return Effect.gen(function*() {
    const { call } = yield* HttpRouter.params
    const method = (call ?? "").split(":")[1]
    if (method === "predictLongRunning") return yield* submit
    if (method === "fetchPredictOperation") return yield* fetch
    const r = refuse(`Unknown method ${method}`, 404)
    return HttpServerResponse.unsafeJson(r.body, { status: r.status })
  })
}

/** Google Veo on Vertex: long-running operations, polled; no push. */
export const veo: SimulatedProvider = {
  name: "veo",
  // an operation is named under its model's full path
  jobId: (model) => `${model}/operations/${crypto.randomUUID()}`,
  render,
  webhook: () => null,
  cancelAnswersEmpty: false,
  routes: (api) =>
    HttpRouter.empty.pipe(
      HttpRouter.post("/veo/v1/projects/:project/locations/:location/publishers/google/models/:call", dispatch(api))
    )
}
