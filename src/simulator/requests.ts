import { Either, ParseResult, Schema } from "effect"

/**
 * What each provider's submit endpoint accepts, and how it refuses the rest: the simulator refuses what the real
 * API refuses (the fields, values and headers the official SDKs' types allow, and nothing else), with that
 * provider's status code and error shape, so a request body that drifts from the SDK fails the tests, not
 * production.
 */
export interface Accepted {
  readonly model: string
  readonly webhookUrl: string | null
}

export interface Refused {
  readonly status: number
  readonly body: unknown
}

export interface SubmitInput {
  readonly headers: Readonly<Record<string, string | undefined>>
  /** The decoded JSON body, or the multipart form as a record of its string fields. */
  readonly body: unknown
  readonly query: URLSearchParams
  /** Path parameters: the model (Replicate's owner/name, fal's app id, Veo's model). */
  readonly model?: string | undefined
}

const reasonOf = (e: ParseResult.ParseError) => ParseResult.TreeFormatter.formatErrorSync(e)

const decode = <A, I>(schema: Schema.Schema<A, I>, body: unknown, refuse: (reason: string) => Refused) =>
  Either.mapLeft(Schema.decodeUnknownEither(schema, { onExcessProperty: "error" })(body), (e) => refuse(reasonOf(e)))

// OpenAI: multipart fields of VideoCreateParams; errors are { error: { message, type, param, code } } with 400
const OpenAISubmit = Schema.Struct({
  prompt: Schema.String.pipe(Schema.minLength(1)),
  model: Schema.optional(Schema.Literal("sora-2", "sora-2-pro")),
  seconds: Schema.optional(Schema.Literal("4", "8", "12")),
  size: Schema.optional(Schema.Literal("720x1280", "1280x720", "1024x1792", "1792x1024"))
})
export const openaiSubmit = (i: SubmitInput): Either.Either<Accepted, Refused> =>
  Either.map(
    decode(OpenAISubmit, i.body, (message) => ({
      status: 400,
      body: { error: { message, type: "invalid_request_error", param: null, code: "invalid_value" } }
    })),
    (b) => ({ model: b.model ?? "sora-2", webhookUrl: null })
  )

// Replicate: { version | (model in path), input, webhook, webhook_events_filter }; 422 problem+json
const ReplicateSubmit = Schema.Struct({
  version: Schema.optional(Schema.String.pipe(Schema.pattern(/^[a-f0-9]{64}$/))),
  input: Schema.Record({ key: Schema.String, value: Schema.Unknown }),
  webhook: Schema.optional(Schema.String.pipe(Schema.pattern(/^https?:\/\//))),
  webhook_events_filter: Schema.optional(Schema.Array(Schema.Literal("start", "output", "logs", "completed"))),
  stream: Schema.optional(Schema.Boolean)
})
export const replicateSubmit = (i: SubmitInput): Either.Either<Accepted, Refused> => {
  const refuse = (detail: string): Refused => ({ status: 422, body: { title: "Invalid input", detail, status: 422 } })
  return Either.flatMap(decode(ReplicateSubmit, i.body, refuse), (b) =>
    b.version === undefined && i.model === undefined
      ? Either.left(refuse("version is required (or POST /v1/models/{owner}/{name}/predictions)"))
      : Either.right({ model: i.model ?? b.version!, webhookUrl: b.webhook ?? null }))
}

// fal (Kling text-to-video): the app's input; FastAPI-style 422 { detail: [{ loc, msg, type }] }
const FalKlingInput = Schema.Struct({
  prompt: Schema.String.pipe(Schema.minLength(1)),
  duration: Schema.optional(Schema.Literal("5", "10")),
  aspect_ratio: Schema.optional(Schema.Literal("16:9", "9:16", "1:1")),
  negative_prompt: Schema.optional(Schema.String),
  cfg_scale: Schema.optional(Schema.Number)
})
export const falSubmit = (i: SubmitInput): Either.Either<Accepted, Refused> =>
  Either.map(
    decode(FalKlingInput, i.body, (msg) => ({
      status: 422,
      body: { detail: [{ loc: ["body"], msg, type: "value_error" }] }
    })),
    () => ({ model: i.model ?? "fal-app", webhookUrl: i.query.get("fal_webhook") })
  )

// Runway: POST /v1/text_to_video with X-Runway-Version; 400 { error, issues }
export const RUNWAY_VERSION = "2024-11-06"
const landscape = Schema.Literal("1280:720", "720:1280")
const RunwayTextToVideo = Schema.Union(
  Schema.Struct({
    model: Schema.Literal("gen4.5"),
    promptText: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(1000)),
    ratio: landscape,
    duration: Schema.Int.pipe(Schema.between(2, 10)),
    seed: Schema.optional(Schema.Int)
  }),
  Schema.Struct({
    model: Schema.Literal("veo3.1", "veo3.1_fast"),
    promptText: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(1000)),
    ratio: Schema.Literal("1280:720", "720:1280", "1080:1920", "1920:1080"),
    duration: Schema.optional(Schema.Literal(4, 6, 8)),
    audio: Schema.optional(Schema.Boolean),
    seed: Schema.optional(Schema.Int)
  })
)
/** image_to_video: what our old client called; it needs a promptImage our product never has. */
const RunwayImageToVideo = Schema.Struct({
  model: Schema.Literal("gen4_turbo", "gen3a_turbo"),
  promptImage: Schema.Union(Schema.String, Schema.Array(Schema.Unknown)),
  promptText: Schema.optional(Schema.String),
  ratio: Schema.String,
  duration: Schema.optional(Schema.Literal(5, 10)),
  seed: Schema.optional(Schema.Int)
})
const runwayRefuse = (error: string): Refused => ({ status: 400, body: { error, issues: [{ message: error }] } })
const runwayVersion = (i: SubmitInput): Either.Either<void, Refused> =>
  i.headers["x-runway-version"] === RUNWAY_VERSION
    ? Either.void
    : Either.left(runwayRefuse(`X-Runway-Version header must be ${RUNWAY_VERSION}`))
export const runwaySubmit =
  (endpoint: "text_to_video" | "image_to_video") => (i: SubmitInput): Either.Either<Accepted, Refused> =>
    Either.flatMap(runwayVersion(i), () => {
      const body: Either.Either<{ readonly model: string }, Refused> = endpoint === "text_to_video"
        ? decode(RunwayTextToVideo, i.body, runwayRefuse)
        : decode(RunwayImageToVideo, i.body, runwayRefuse)
      return Either.map(body, (b) => ({ model: b.model, webhookUrl: null }))
    })

// Luma: GenerationCreateParams; 400 { detail }
const LumaSubmit = Schema.Struct({
  model: Schema.Literal("ray-2", "ray-flash-2"),
  prompt: Schema.optional(Schema.String),
  generation_type: Schema.optional(Schema.Literal("video")),
  aspect_ratio: Schema.optional(Schema.Literal("1:1", "16:9", "9:16", "4:3", "3:4", "21:9", "9:21")),
  duration: Schema.optional(Schema.Literal("5s", "9s")),
  resolution: Schema.optional(Schema.Literal("540p", "720p", "1080p", "4k")),
  loop: Schema.optional(Schema.Boolean),
  callback_url: Schema.optional(Schema.String)
})
export const lumaSubmit = (i: SubmitInput): Either.Either<Accepted, Refused> =>
  Either.map(
    decode(LumaSubmit, i.body, (detail) => ({ status: 400, body: { detail } })),
    (b) => ({ model: b.model, webhookUrl: b.callback_url ?? null })
  )

// Veo on Vertex: { instances: [{ prompt }], parameters }; Google's { error: { code, message, status } }
const VeoSubmit = Schema.Struct({
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
export const veoRefuse = (message: string, code = 400): Refused => ({
  status: code,
  body: { error: { code, message, status: code === 404 ? "NOT_FOUND" : "INVALID_ARGUMENT" } }
})
export const veoSubmit = (i: SubmitInput): Either.Either<Accepted, Refused> => {
  const model = i.model ?? ""
  const durations = model.startsWith("veo-2.") ? [5, 6, 7, 8] : model.startsWith("veo-3.") ? [4, 6, 8] : null
  if (durations === null) return Either.left(veoRefuse(`Publisher model ${model} is not found`, 404))
  return Either.flatMap(
    decode(VeoSubmit, i.body, (m) => veoRefuse(m)),
    (b) =>
      !durations.includes(b.parameters.durationSeconds)
        ? Either.left(veoRefuse(`durationSeconds must be one of ${durations.join(", ")} for ${model}`))
        : b.parameters.resolution !== undefined && model.startsWith("veo-2.")
        ? Either.left(veoRefuse(`resolution is not supported by ${model}`))
        : Either.right({ model, webhookUrl: null })
  )
}
