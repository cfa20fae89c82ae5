import type { QueueStatus } from "@fal-ai/client"
import type { EndpointTypeMap } from "@fal-ai/client/endpoints"
import { Effect, Either, Option, Schema } from "effect"
import * as S from "../config/Settings.js"
import { makeFalKeys } from "./falKeys.js"
import { parseWith, type ProviderReport, skipping, type WebhookProtocol } from "./ProviderAdapter.js"
import { constant, type ProviderDefinition, type Verify } from "./ProviderDefinition.js"
import { type Ed25519Jwk, verifyFalWebhook } from "./signatures.js"
import { allowed, atLeast, refuseUnless } from "./transport.js"
import { withCallbackToken } from "./webhookVerifiers.js"

/** fal.ai queue status: GET .../requests/{id}/status. */
export const FalStatus = Schema.Struct({
  status: Schema.Literal("IN_QUEUE", "IN_PROGRESS", "COMPLETED"),
  request_id: Schema.optional(Schema.String),
  queue_position: Schema.optional(Schema.Number)
})

/** fal.ai webhook body: status OK | ERROR with the result payload or an error. */
const FalWebhook = Schema.Struct({
  request_id: Schema.String,
  status: Schema.Literal("OK", "ERROR"),
  payload: Schema.optional(Schema.NullOr(Schema.Unknown)),
  error: Schema.optional(Schema.NullOr(Schema.String))
})

/** A file in a fal result (fal's File: `{ url, content_type, file_name, file_size }`). */
const FalFile = Schema.Struct({ url: Schema.String })

/**
 * fal video apps return `{ video: File }` (some `{ videos: File[] }`). Decoded leniently: an entry that is not a
 * File (`5`, `null`, `"x"`) is skipped, so a signed but odd body neither crashes its reader (a TypeError was a 500,
 * retried by fal forever) nor costs the good outputs beside it; with none left the task has no output to fetch.
 */
const FalResult = Schema.Struct({
  video: Schema.optional(skipping(FalFile)),
  videos: Schema.optional(skipping(FalFile))
})

export const falOutputUrls = (payload: unknown): ReadonlyArray<string> =>
  Option.match(Schema.decodeUnknownOption(FalResult)(payload), {
    onNone: () => [],
    onSome: (r) => [...(r.video ?? []), ...(r.videos ?? [])].map((f) => f.url)
  })

export const falStatusReport = (requestId: string, s: typeof FalStatus.Type): ProviderReport => ({
  providerTaskId: requestId,
  clientRequestId: null,
  eventType: `status.${s.status}`,
  providerUpdatedAt: null,
  providerSequence: null,
  // COMPLETED says the request ended, not how: the result (GET .../requests/{id}) decides success
  status: s.status === "IN_QUEUE" ? "queued" : "running",
  stage: s.status === "IN_PROGRESS" ? "generating" : null,
  progress: null,
  errorClass: null,
  errorCode: null,
  outputRefs: []
})

export const falWebhooks: WebhookProtocol = {
  scheme: "fal-ed25519",
  parse: parseWith(FalWebhook, (w): ProviderReport => ({
    providerTaskId: w.request_id,
    clientRequestId: null,
    eventType: `webhook.${w.status}`,
    providerUpdatedAt: null,
    providerSequence: null,
    status: w.status === "OK" ? "succeeded" : "failed",
    stage: null,
    progress: null,
    errorClass: w.status === "ERROR" ? "provider_failed" : null,
    errorCode: w.status === "ERROR" ? "fal_error" : null,
    outputRefs: w.status === "OK" ? falOutputUrls(w.payload) : []
  }))
}

/**
 * The fal apps this definition speaks: fal hosts thousands, each with its own input. These Kling text-to-video
 * apps share one input type in the SDK's endpoint map, and our body is checked against it.
 */
const models = [
  "fal-ai/kling-video/v2.1/master/text-to-video",
  "fal-ai/kling-video/v2.5-turbo/pro/text-to-video",
  "fal-ai/kling-video/v2/master/text-to-video",
  "fal-ai/kling-video/v1.6/pro/text-to-video",
  "fal-ai/kling-video/v1.6/standard/text-to-video"
] as const satisfies ReadonlyArray<keyof EndpointTypeMap>
type FalInput = EndpointTypeMap[(typeof models)[number]]["input"]

/** Kling on fal makes 5 or 10 s clips, named as strings. */
export const falDuration = (seconds: number): Either.Either<NonNullable<FalInput["duration"]>, string> =>
  Either.map(atLeast([5, 10] as const)(seconds), (s) => (s === 5 ? "5" : "10"))

/**
 * The queue's status, result and cancel URLs name the app by owner/alias only, without its path
 * (`fal-ai/kling-video`, not `fal-ai/kling-video/v2.1/master/text-to-video`): the SDK's `parseEndpointId` does
 * the same. Only the submit goes to the full endpoint id.
 */
export const falAppRoot = (model: string): string => {
  const parts = model.split("/")
  return ["workflows", "comfy"].includes(parts[0]!) ? parts.slice(0, 3).join("/") : parts.slice(0, 2).join("/")
}

/** Kling on fal has no resolution input (the app decides it): we ask for landscape, like every other provider. */
export const falBody = (prompt: string, duration: NonNullable<FalInput["duration"]>) =>
  ({ prompt, duration, aspect_ratio: "16:9" }) satisfies FalInput

const falCheck = (model: string, seconds: number) =>
  !(models as ReadonlyArray<string>).includes(model)
    ? Either.left(`model ${model}: this platform speaks fal's ${models.join(", ")}`)
    : falDuration(seconds)

export const fal: ProviderDefinition = {
  name: "fal",
  title: "fal.ai queue",
  defaultBaseUrl: "https://queue.fal.run",
  // fal's CDN: https://v3.fal.media/files/…
  outputHosts: ["fal.media", "*.fal.media"],
  exampleModel: models[0],
  // fal's key scheme, not Bearer (the SDK's request.js)
  authHeaders: (key) => ({ authorization: `Key ${key}` }),
  check: (r) => allowed(falCheck(r.model, r.durationSeconds)),
  client: constant(({ callbackUrl, transport }) => ({
    submit: (r) =>
      refuseUnless(falCheck(r.model, r.durationSeconds), (duration) =>
        // the URL names the attempt (signed token): a webhook for a job whose submit response was lost finds it
        Effect.flatMap(callbackUrl(r.attemptId), (url) =>
          transport.submit(
            `/${r.model}?fal_webhook=${encodeURIComponent(url)}`,
            falBody(r.prompt, duration),
            Schema.Struct({ request_id: Schema.String }),
            (a) => a.request_id,
            r.clientRequestId
          ))),
    // COMPLETED only says it ended: the result endpoint says how
    query: (id, model) =>
      Effect.flatMap(
        transport.call("GET", `/${falAppRoot(model)}/requests/${id}/status`, FalStatus),
        ({ body: s }) =>
          s.status !== "COMPLETED"
            ? Effect.succeed(falStatusReport(id, s))
            : Effect.map(
              transport.call("GET", `/${falAppRoot(model)}/requests/${id}`, Schema.Unknown, { answers: [400, 422] }),
              (r): ProviderReport =>
                r.status === 200
                  ? {
                    ...falStatusReport(id, s),
                    eventType: "result.OK",
                    status: "succeeded",
                    outputRefs: falOutputUrls(r.body)
                  }
                  : {
                    ...falStatusReport(id, s),
                    eventType: "result.ERROR",
                    status: "failed",
                    errorClass: "provider_failed",
                    errorCode: `http_${r.status}`
                  }
            )
      ),
    cancel: (id, model) => transport.send("PUT", `/${falAppRoot(model)}/requests/${id}/cancel`)
  })),
  webhook: {
    protocol: falWebhooks,
    verifier: withCallbackToken(
      "fal",
      S.map(
        S.all({
          jwksUrl: S.optionalString(
            "FAL_JWKS_URL",
            "Where fal.ai's webhook signing keys are (JWKS); unset, fal webhooks are refused (404)"
          ),
          userId: S.optionalString("FAL_USER_ID", "Our fal.ai user id, which fal signs into every webhook"),
          jwksTimeout: S.duration(
            "FAL_JWKS_TIMEOUT",
            "How long a fetch of fal.ai's signing keys may take; a webhook waits no longer for them (then 503)",
            "5 seconds"
          )
        }),
        ({ jwksTimeout, jwksUrl, userId }) => ({ toleranceSeconds }) =>
          Option.isNone(jwksUrl) || Option.isNone(userId)
            ? Option.none()
            : Option.some(Effect.map(makeFalKeys(jwksUrl.value, jwksTimeout), (keys): Verify => (r, at) =>
              Effect.gen(function*() {
                const check = (k: ReadonlyArray<Ed25519Jwk>) =>
                  verifyFalWebhook({
                    keys: k,
                    userId: userId.value,
                    headers: r.headers,
                    body: r.body,
                    now: at,
                    toleranceSeconds
                  })
                const first = check((yield* keys(false)).keys)
                // an unknown key may be a rotation: fetch the set again (rate-limited) before refusing
                if (Either.isRight(first) || first.left !== "bad_signature") return first
                const again = yield* keys(true)
                const second = check(again.keys)
                // without a current key set we cannot tell a forgery from a rotation: the sender should retry
                return Either.isLeft(second) && !again.current ? Either.left("keys_unavailable" as const) : second
              })))
      )
    )
  }
}

/** Our status schema reads a subset of the SDK's QueueStatus: a compile error means the two drifted apart. */
export const falMatchesSdk: QueueStatus extends typeof FalStatus.Encoded ? true : false = true
