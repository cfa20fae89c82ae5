import type { TaskRetrieveResponse } from "@runwayml/sdk/resources/tasks"
import type { TextToVideoCreateParams } from "@runwayml/sdk/resources/text-to-video"
import { Effect, Either, Schema } from "effect"
import type { ProviderReport } from "./ProviderAdapter.js"
import { percent } from "./ProviderAdapter.js"
import { constant, type ProviderDefinition, type Resolution } from "./ProviderDefinition.js"
import { allowed, atLeast, refuseUnless } from "./transport.js"

/** Runway: polling only. GET /v1/tasks/{id}. THROTTLED is queued behind the org's concurrency, not an error. */
export const RunwayTask = Schema.Struct({
  id: Schema.String,
  status: Schema.Literal("PENDING", "THROTTLED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"),
  progress: Schema.optional(Schema.NullOr(Schema.Number)),
  output: Schema.optional(Schema.NullOr(Schema.Array(Schema.String))),
  failureCode: Schema.optional(Schema.NullOr(Schema.String))
})

export const runwayReport = (t: typeof RunwayTask.Type): ProviderReport => ({
  providerTaskId: t.id,
  clientRequestId: null,
  eventType: `task.${t.status}`,
  providerUpdatedAt: null,
  providerSequence: null,
  status: t.status === "PENDING" || t.status === "THROTTLED"
    ? "queued"
    : t.status === "RUNNING"
    ? "running"
    : t.status === "SUCCEEDED"
    ? "succeeded"
    : t.status === "FAILED"
    ? "failed"
    : "canceled",
  stage: t.status === "RUNNING" ? "generating" : null,
  progress: percent(t.progress, 1),
  errorClass: t.status === "FAILED" ? "provider_failed" : null,
  errorCode: t.failureCode ?? null,
  outputRefs: t.status === "SUCCEEDED" ? (t.output ?? []) : []
})

/**
 * Our product request is text only. Runway's image_to_video (gen4_turbo, gen3a_turbo) requires a `promptImage`
 * we do not have, so every such submission would be refused: we submit to POST /v1/text_to_video, whose models
 * take a `promptText` alone, and refuse any other model before sending (`unsupported_request`).
 */
const durations = {
  // "an integer from 2 to 10"
  "gen4.5": atLeast([2, 3, 4, 5, 6, 7, 8, 9, 10] as const),
  "veo3.1": atLeast([4, 6, 8] as const),
  "veo3.1_fast": atLeast([4, 6, 8] as const)
} as const
type RunwayModel = keyof typeof durations
const isModel = (m: string): m is RunwayModel => Object.hasOwn(durations, m)

/** The clip length each text-to-video model takes, in whole seconds. */
export const runwayDuration = (model: string, seconds: number): Either.Either<number, string> =>
  isModel(model)
    ? durations[model](seconds)
    : Either.left(`model ${model}: Runway text-to-video offers ${Object.keys(durations).join(", ")}`)

/** The API version every request must name (the SDK's default); without it Runway answers 400. */
export const RUNWAY_VERSION = "2024-11-06"

export const runwayBody = (
  model: string,
  promptText: string,
  duration: number,
  resolution: Resolution
): Either.Either<TextToVideoCreateParams, string> => {
  // both models take landscape 1280:720; veo3.1 also 1920:1080
  const wide = resolution === "1080p"
  switch (model) {
    case "gen4.5":
      return Either.right({ model, promptText, duration, ratio: "1280:720" } satisfies TextToVideoCreateParams)
    case "veo3.1":
    case "veo3.1_fast":
      return duration === 4 || duration === 6 || duration === 8
        ? Either.right(
          { model, promptText, duration, ratio: wide ? "1920:1080" : "1280:720" } satisfies TextToVideoCreateParams
        )
        : Either.left(`duration ${duration} s: ${model} offers 4, 6, 8 s`)
    default:
      return Either.left(`model ${model}: not a Runway text-to-video model`)
  }
}

export const runway: ProviderDefinition = {
  name: "runway",
  title: "Runway",
  defaultBaseUrl: "https://api.dev.runwayml.com",
  // the CloudFront host of Runway's documented task outputs (docs.dev.runwayml.com, API Output Formats)
  outputHosts: ["dnznrvs05pmza.cloudfront.net"],
  exampleModel: "gen4.5",
  authHeaders: (key) => ({ authorization: `Bearer ${key}` }),
  headers: { "x-runway-version": RUNWAY_VERSION },
  check: (r) => allowed(runwayDuration(r.model, r.durationSeconds)),
  client: constant(({ transport }) => ({
    submit: (r) =>
      refuseUnless(
        Either.flatMap(
          runwayDuration(r.model, r.durationSeconds),
          (d) => runwayBody(r.model, r.prompt, d, r.resolution)
        ),
        (body) =>
          transport.submit(
            "/v1/text_to_video",
            body,
            Schema.Struct({ id: Schema.String }),
            (a) => a.id,
            r.clientRequestId
          )
      ),
    query: (id) => Effect.map(transport.call("GET", `/v1/tasks/${id}`, RunwayTask), (r) => runwayReport(r.body)),
    // DELETE cancels a running task (and deletes a finished one)
    cancel: (id) => transport.send("DELETE", `/v1/tasks/${id}`)
  }))
}

/** Our schema reads a subset of every SDK task state: a compile error means the two drifted apart. */
export const runwayMatchesSdk: TaskRetrieveResponse extends typeof RunwayTask.Encoded ? true : false = true
