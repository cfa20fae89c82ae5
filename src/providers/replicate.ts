import { Effect, Either, Schema } from "effect"
import type { default as Replicate, Prediction } from "replicate"
import { parseWith, type ProviderReport, validDate, type WebhookProtocol } from "./ProviderAdapter.js"
import { constant, type ProviderDefinition } from "./ProviderDefinition.js"
import { allowed, refuseUnless } from "./transport.js"
import { standardWebhooks, withCallbackToken } from "./webhookVerifiers.js"

/** A Replicate prediction: the webhook body and the GET /v1/predictions/{id} response are the same object. */
export const ReplicatePrediction = Schema.Struct({
  id: Schema.String,
  status: Schema.Literal("starting", "processing", "succeeded", "failed", "canceled", "aborted"),
  output: Schema.optional(Schema.Unknown),
  error: Schema.optional(Schema.NullOr(Schema.Unknown)),
  completed_at: Schema.optional(Schema.NullOr(Schema.String)),
  created_at: Schema.optional(Schema.NullOr(Schema.String))
})

const outputUrls = (output: unknown): ReadonlyArray<string> =>
  typeof output === "string"
    ? [output]
    : Array.isArray(output)
    ? output.filter((x): x is string => typeof x === "string")
    : []

export const replicateReport = (p: typeof ReplicatePrediction.Type): ProviderReport => ({
  providerTaskId: p.id,
  clientRequestId: null,
  eventType: `prediction.${p.status}`,
  providerUpdatedAt: p.completed_at ? validDate(new Date(p.completed_at)) : null,
  providerSequence: null,
  status: p.status === "starting" || p.status === "processing"
    ? "running"
    : p.status === "succeeded"
    ? "succeeded"
    : p.status === "canceled"
    ? "canceled"
    : "failed",
  stage: p.status === "starting" ? "starting" : p.status === "processing" ? "generating" : null,
  progress: null,
  errorClass: p.status === "failed" || p.status === "aborted" ? "provider_failed" : null,
  errorCode: p.status === "aborted" ? "aborted" : p.error ? "prediction_error" : null,
  outputRefs: p.status === "succeeded" ? outputUrls(p.output) : []
})

export const replicateWebhooks: WebhookProtocol = {
  scheme: "standard-webhooks",
  parse: parseWith(ReplicatePrediction, replicateReport)
}

/**
 * The SDK's `predictions.create` options as they go on the wire: less what only the SDK uses (wait, signal,
 * stream), and `model`, which the SDK puts in the path.
 */
type CreateBody =
  & Omit<Parameters<Replicate["predictions"]["create"]>[0], "wait" | "signal" | "stream" | "model" | "version">
  & { readonly version?: string }

/**
 * Where a model name goes, as the SDK routes it: `owner/name` (an official model, its latest version) to
 * POST /v1/models/{owner}/{name}/predictions; `owner/name:version` or a bare version id to POST /v1/predictions
 * with `version` (the version id alone).
 */
export const replicateRoute = (
  model: string
): Either.Either<{ readonly path: string; readonly version: string | undefined }, string> => {
  const [name, version] = model.split(":", 2)
  if (version !== undefined) {
    return /^[a-f0-9]{64}$/.test(version) && /^[\w.-]+\/[\w.-]+$/.test(name!)
      ? Either.right({ path: "/v1/predictions", version })
      : Either.left(`model ${model}: expected owner/name:<64-hex version id>`)
  }
  if (/^[a-f0-9]{64}$/.test(model)) return Either.right({ path: "/v1/predictions", version: model })
  return /^[\w.-]+\/[\w.-]+$/.test(model)
    ? Either.right({ path: `/v1/models/${model}/predictions`, version: undefined })
    : Either.left(`model ${model}: expected owner/name, owner/name:version or a version id`)
}

/**
 * Replicate's inputs are each model's own (the SDK types `input` as `object`): `duration` is passed as whole
 * seconds, which the video models we use (Kling, Wan, Minimax) take, and the model's schema refuses with a 422
 * what it does not offer. Nothing to map here, and nothing to refuse before asking.
 */
export const replicateDuration = (seconds: number): Either.Either<number, string> => Either.right(seconds)

export const replicateBody = (
  route: { readonly version: string | undefined },
  input: { readonly prompt: string; readonly duration: number },
  webhook: string
): CreateBody => ({
  ...(route.version === undefined ? {} : { version: route.version }),
  input,
  webhook,
  // start: the job runs; completed: its end. output/logs would be a webhook every 500 ms for nothing we use.
  webhook_events_filter: ["start", "completed"]
})

export const replicate: ProviderDefinition = {
  name: "replicate",
  title: "Replicate",
  defaultBaseUrl: "https://api.replicate.com",
  // prediction outputs: https://replicate.delivery/… and its subdomains (pbxt.replicate.delivery)
  outputHosts: ["replicate.delivery", "*.replicate.delivery"],
  exampleModel: "kwaivgi/kling-v2.1",
  authHeaders: (key) => ({ authorization: `Bearer ${key}` }),
  check: (r) => allowed(Either.flatMap(replicateRoute(r.model), () => replicateDuration(r.durationSeconds))),
  client: constant(({ callbackUrl, transport }) => ({
    submit: (r) =>
      refuseUnless(
        Either.all([replicateRoute(r.model), replicateDuration(r.durationSeconds)]),
        ([route, duration]) =>
          // the URL names the attempt (signed token): a webhook for a job whose submit response was lost finds it
          Effect.flatMap(callbackUrl(r.attemptId), (url) =>
            transport.submit(
              route.path,
              replicateBody(route, { prompt: r.prompt, duration }, url),
              ReplicatePrediction,
              (p) => p.id,
              r.clientRequestId
            ))
      ),
    query: (id) =>
      Effect.map(transport.call("GET", `/v1/predictions/${id}`, ReplicatePrediction), (r) => replicateReport(r.body)),
    cancel: (id) => transport.send("POST", `/v1/predictions/${id}/cancel`)
  })),
  webhook: {
    protocol: replicateWebhooks,
    verifier: withCallbackToken("replicate", standardWebhooks("REPLICATE_WEBHOOK_SECRET", "Replicate"))
  }
}

/** Our schema reads a subset of the SDK's Prediction: a compile error here means the two drifted apart. */
export const replicateMatchesSdk: Prediction extends typeof ReplicatePrediction.Encoded ? true : false = true
