import type { GenerateVideosConfig } from "@google/genai"
import { Effect, Either, Option, Schema } from "effect"
import * as S from "../config/Settings.js"
import type { ProviderReport } from "./ProviderAdapter.js"
import type { ProviderDefinition, Resolution } from "./ProviderDefinition.js"
import { allowed, atLeast, refuseUnless } from "./transport.js"

/** Google Veo (Vertex): a long-running operation, polled until `done`, then `response` or `error`. No push. */
export const VeoOperation = Schema.Struct({
  name: Schema.String,
  done: Schema.optional(Schema.Boolean),
  error: Schema.optional(
    Schema.Struct({ code: Schema.optional(Schema.Number), message: Schema.optional(Schema.String) })
  ),
  response: Schema.optional(Schema.Struct({
    videos: Schema.optional(Schema.Array(Schema.Struct({ gcsUri: Schema.optional(Schema.String) })))
  }))
})

export const veoReport = (op: typeof VeoOperation.Type): ProviderReport => ({
  providerTaskId: op.name,
  clientRequestId: null,
  eventType: op.done ? (op.error ? "operation.error" : "operation.done") : "operation.running",
  providerUpdatedAt: null,
  providerSequence: null,
  status: !op.done ? "running" : op.error ? "failed" : "succeeded",
  stage: op.done ? null : "generating",
  progress: null,
  errorClass: op.done && op.error ? "provider_failed" : null,
  errorCode: op.error?.code !== undefined ? `rpc_${op.error.code}` : null,
  outputRefs: op.done && !op.error
    ? (op.response?.videos ?? []).flatMap((v) => (v.gcsUri ? [v.gcsUri] : []))
    : []
})

/** Veo 2 makes 5–8 s; Veo 3 and 3.1 make 4, 6 or 8 s. */
export const veoDuration = (model: string, seconds: number): Either.Either<number, string> => {
  const generation = /^veo-(\d)\./.exec(model)?.[1]
  return generation === "2"
    ? atLeast([5, 6, 7, 8] as const)(seconds)
    : generation === "3"
    ? atLeast([4, 6, 8] as const)(seconds)
    : Either.left(`model ${model}: expected a Veo model (veo-2.0-…, veo-3.0-…, veo-3.1-…)`)
}

/**
 * Vertex's wire `parameters` carry the SDK's GenerateVideosConfig names where they are the same field
 * (durationSeconds, aspectRatio, resolution); numberOfVideos and outputGcsUri become sampleCount and storageUri
 * (the SDK's generateVideosConfigToVertex). The SDK exports no type for the wire body itself.
 */
type VeoParameters =
  & Pick<GenerateVideosConfig, "durationSeconds" | "aspectRatio" | "resolution">
  & { readonly sampleCount: NonNullable<GenerateVideosConfig["numberOfVideos"]>; readonly storageUri?: string }

export const veoBody = (
  model: string,
  prompt: string,
  durationSeconds: number,
  resolution: Resolution,
  storageUri: Option.Option<string>
) => ({
  instances: [{ prompt }],
  parameters: {
    durationSeconds,
    aspectRatio: "16:9",
    sampleCount: 1,
    // Veo 2 has no resolution parameter; Veo 3 makes 720p or 1080p
    ...(model.startsWith("veo-3") ? { resolution: resolution === "1080p" ? "1080p" : "720p" } : {}),
    // without a bucket Vertex returns the video inline, base64, in the operation: megabytes per poll
    ...Option.match(storageUri, { onNone: () => ({}), onSome: (uri) => ({ storageUri: uri }) })
  } satisfies VeoParameters
})

/** An operation is named under its model: `projects/…/models/{model}/operations/{id}`. */
const modelPathOf = (operation: string) => operation.split("/operations/")[0]!

export const veo: ProviderDefinition = {
  name: "veo",
  title: "Google Veo (Vertex AI)",
  defaultBaseUrl: "https://us-central1-aiplatform.googleapis.com",
  // gs:// URIs are not fetched; an https form of them is Cloud Storage's
  outputHosts: ["storage.googleapis.com"],
  exampleModel: "veo-3.0-generate-001",
  // an OAuth access token (gcloud auth print-access-token), not an API key
  authHeaders: (key) => ({ authorization: `Bearer ${key}` }),
  check: (r) => allowed(veoDuration(r.model, r.durationSeconds)),
  client: S.map(
    S.all({
      project: S.optionalString(
        "VEO_PROJECT",
        "Google Cloud project that runs Veo on Vertex AI; unset, Veo submissions are refused"
      ),
      location: S.string("VEO_LOCATION", "Vertex AI region of Veo (matches VEO_BASE_URL's host)", "us-central1"),
      storageUri: S.optionalString(
        "VEO_STORAGE_URI",
        "gs:// prefix where Veo writes its videos (else they come back inline)"
      )
    }),
    ({ location, project, storageUri }) => ({ transport }) => ({
      submit: (r) =>
        refuseUnless(
          Either.flatMap(
            Either.fromOption(project, () => "VEO_PROJECT is not set"),
            (p) => Either.map(veoDuration(r.model, r.durationSeconds), (d) => [p, d] as const)
          ),
          ([p, d]) =>
            transport.submit(
              `/v1/projects/${p}/locations/${location}/publishers/google/models/${r.model}:predictLongRunning`,
              veoBody(r.model, r.prompt, d, r.resolution, storageUri),
              Schema.Struct({ name: Schema.String }),
              (a) => a.name,
              r.clientRequestId
            )
        ),
      // Vertex publisher-model operations are read with POST {model}:fetchPredictOperation, not GET {name}
      query: (name) =>
        Effect.map(
          transport.call("POST", `/v1/${modelPathOf(name)}:fetchPredictOperation`, VeoOperation, {
            body: { operationName: name }
          }),
          (r) => veoReport(r.body)
        ),
      // Veo has no cancel for generations: the operation runs to its end
      cancel: () => Effect.void
    })
  )
}
