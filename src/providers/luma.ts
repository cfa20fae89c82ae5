import { Effect, Either, Schema } from "effect"
import type { GenerationCreateParams } from "lumaai/resources/generations/generations"
import { parseWith, type ProviderReport, type WebhookProtocol } from "./ProviderAdapter.js"
import { constant, type ProviderDefinition, type Resolution } from "./ProviderDefinition.js"
import { allowed, atLeast, refuseUnless } from "./transport.js"
import { callbackTokens } from "./webhookVerifiers.js"

/** A Luma generation: the callback body (sent on every update) and the GET response. */
export const LumaGeneration = Schema.Struct({
  id: Schema.String,
  state: Schema.Literal("queued", "dreaming", "completed", "failed"),
  failure_reason: Schema.optional(Schema.NullOr(Schema.String)),
  assets: Schema.optional(Schema.NullOr(Schema.Struct({ video: Schema.optional(Schema.NullOr(Schema.String)) }))),
  created_at: Schema.optional(Schema.NullOr(Schema.String))
})

export const lumaReport = (g: typeof LumaGeneration.Type): ProviderReport => ({
  providerTaskId: g.id,
  clientRequestId: null,
  eventType: `generation.${g.state}`,
  providerUpdatedAt: null,
  providerSequence: null,
  status: g.state === "queued"
    ? "queued"
    : g.state === "dreaming"
    ? "running"
    : g.state === "completed"
    ? "succeeded"
    : "failed",
  stage: g.state === "dreaming" ? "generating" : null,
  progress: null,
  errorClass: g.state === "failed" ? "provider_failed" : null,
  errorCode: g.state === "failed" ? "generation_failed" : null,
  outputRefs: g.state === "completed" && g.assets?.video ? [g.assets.video] : []
})

/** Unsigned: authenticated by the per-attempt token in the callback URL. */
export const lumaWebhooks: WebhookProtocol = {
  scheme: "callback-token",
  parse: parseWith(LumaGeneration, lumaReport)
}

const models = ["ray-2", "ray-flash-2"] as const satisfies ReadonlyArray<GenerationCreateParams["model"]>

/** Ray makes 5 s or 9 s clips, named "5s" / "9s". */
export const lumaDuration = (seconds: number): Either.Either<"5s" | "9s", string> =>
  Either.map(atLeast([5, 9] as const)(seconds), (s) => (s === 5 ? "5s" : "9s"))

/** Luma's lowest resolution is 540p: 480p asks for that. */
const resolutionOf = (r: Resolution) => (r === "480p" ? "540p" : r)

export const lumaBody = (
  model: GenerationCreateParams["model"],
  prompt: string,
  duration: "5s" | "9s",
  resolution: Resolution,
  callbackUrl: string
) =>
  ({
    model,
    prompt,
    duration,
    resolution: resolutionOf(resolution),
    aspect_ratio: "16:9",
    callback_url: callbackUrl
  }) satisfies GenerationCreateParams

const lumaCheck = (model: string, seconds: number) =>
  (models as ReadonlyArray<string>).includes(model)
    ? Either.map(lumaDuration(seconds), (d) => [model as GenerationCreateParams["model"], d] as const)
    : Either.left(`model ${model}: Luma offers ${models.join(", ")}`)

export const luma: ProviderDefinition = {
  name: "luma",
  title: "Luma Dream Machine",
  defaultBaseUrl: "https://api.lumalabs.ai",
  // generation assets: https://storage.cdn-luma.com/dream_machine/…
  outputHosts: ["storage.cdn-luma.com"],
  exampleModel: "ray-2",
  authHeaders: (key) => ({ authorization: `Bearer ${key}` }),
  check: (r) => allowed(lumaCheck(r.model, r.durationSeconds)),
  client: constant(({ callbackUrl, transport }) => ({
    submit: (r) =>
      refuseUnless(lumaCheck(r.model, r.durationSeconds), ([model, duration]) =>
        // unsigned callbacks: the token in the URL is how we know the callback is Luma's for this attempt
        Effect.flatMap(callbackUrl(r.attemptId), (url) =>
          transport.submit(
            // the SDK's generations.create: POST /generations/video
            "/dream-machine/v1/generations/video",
            lumaBody(model, r.prompt, duration, r.resolution, url),
            LumaGeneration,
            (g) => g.id,
            r.clientRequestId
          ))),
    query: (id) =>
      Effect.map(
        transport.call("GET", `/dream-machine/v1/generations/${id}`, LumaGeneration),
        (r) => lumaReport(r.body)
      ),
    // Luma has no cancel: deleting the generation is the closest (the SDK sends Accept: */*, the answer is empty)
    cancel: (id) => transport.send("DELETE", `/dream-machine/v1/generations/${id}`)
  })),
  webhook: { protocol: lumaWebhooks, verifier: callbackTokens("luma") }
}
