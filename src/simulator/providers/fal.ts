import * as HttpRouter from "@effect/platform/HttpRouter"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import type { QueueStatus, WebHookResponse } from "@fal-ai/client"
import type { EndpointTypeMap } from "@fal-ai/client/endpoints"
import { Effect, Either, Schema } from "effect"
import { type KeyObject, sign } from "node:crypto"
import { falSigningString } from "../../providers/signatures.js"
import { decodeStrict, outputUrl, type SimulatedProvider, type Validate } from "../SimulatedProvider.js"
import { type Job, type Phase, phaseOf } from "../SimulatorState.js"

type KlingOutput = EndpointTypeMap["fal-ai/kling-video/v2.1/master/text-to-video"]["output"]

// a Kling text-to-video app's input; FastAPI's 422 { detail: [{ loc, msg, type }] }
const KlingInput = Schema.Struct({
  prompt: Schema.String.pipe(Schema.minLength(1)),
  duration: Schema.optional(Schema.Literal("5", "10")),
  aspect_ratio: Schema.optional(Schema.Literal("16:9", "9:16", "1:1")),
  negative_prompt: Schema.optional(Schema.String),
  cfg_scale: Schema.optional(Schema.Number)
})

const validate: Validate = (i) =>
  Either.map(
    decodeStrict(KlingInput, i.body, (msg) => ({
      status: 422,
      body: { detail: [{ loc: ["body"], msg, type: "value_error" }] }
    })),
    () => ({ model: i.model ?? "fal-app", webhookUrl: i.query.get("fal_webhook") })
  )

/** Status, result and cancel live under owner/alias, whatever the app's path. */
const root = (job: Job) => `${job.outputBase}/fal/${job.model.split("/").slice(0, 2).join("/")}/requests/${job.id}`

const render = (job: Job, phase: Phase): QueueStatus => {
  const urls = {
    request_id: job.id,
    response_url: root(job),
    status_url: `${root(job)}/status`,
    cancel_url: `${root(job)}/cancel`
  }
  return phase._tag === "queued"
    ? { ...urls, status: "IN_QUEUE", queue_position: 0 }
    : phase._tag === "running"
    ? { ...urls, status: "IN_PROGRESS", logs: [] }
    : { ...urls, status: "COMPLETED", logs: [] }
}

const video = (job: Job): KlingOutput => ({ video: { url: outputUrl(job), content_type: "video/mp4" } })

/** The result endpoint (GET .../requests/{id}) once the request is COMPLETED. */
const result = (job: Job, now: number): { status: number; body: unknown } => {
  const phase = phaseOf(job, now)
  if (phase._tag !== "done") return { status: 400, body: { detail: "Request is still in progress" } }
  return phase.outcome === "succeeded"
    ? { status: 200, body: video(job) }
    : { status: 422, body: { detail: phase.outcome === "canceled" ? "Request was canceled" : "Generation failed" } }
}

const signed = (job: Job, body: string, key: KeyObject) => {
  const ts = String(Math.floor(Date.now() / 1000))
  const userId = "sim-user"
  const signature = sign(null, Buffer.from(falSigningString(job.id, userId, ts, Buffer.from(body))), key)
  return {
    "content-type": "application/json",
    "x-fal-webhook-request-id": job.id,
    "x-fal-webhook-user-id": userId,
    "x-fal-webhook-timestamp": ts,
    "x-fal-webhook-signature": signature.toString("hex")
  }
}

/** fal.ai queue: one webhook at the end (OK | ERROR), Ed25519-signed with a key from its JWKS. */
export const makeFal = (publicJwk: object): SimulatedProvider => ({
  name: "fal",
  jobId: () => crypto.randomUUID(),
  render,
  webhook: (job, phase, signers) => {
    if (job.webhookUrl === null || phase._tag !== "done" || phase.outcome === "canceled") return null
    const payload: WebHookResponse<KlingOutput | null> = phase.outcome === "succeeded"
      ? { request_id: job.id, status: "OK", payload: video(job) } as WebHookResponse<KlingOutput>
      : { request_id: job.id, status: "ERROR", error: "generation failed", payload: null }
    const body = JSON.stringify(payload)
    return { url: job.webhookUrl, body, headers: signed(job, body, signers.falKey) }
  },
  cancelAnswersEmpty: false,
  routes: (api) =>
    HttpRouter.empty.pipe(
      HttpRouter.get("/fal/:owner/:alias/requests/:id/status", api.job()),
      HttpRouter.get(
        "/fal/:owner/:alias/requests/:id",
        api.job({ render: result, notFound: { status: 404, body: { detail: "Request not found" } } })
      ),
      HttpRouter.put("/fal/:owner/:alias/requests/:id/cancel", api.cancel),
      HttpRouter.get(
        "/fal/.well-known/jwks.json",
        Effect.succeed(HttpServerResponse.unsafeJson({ keys: [{ ...publicJwk, kid: "sim-fal-1" }] }))
      ),
      HttpRouter.post("/fal/*", api.submit({ validate, modelOf: (p) => p["*"] }))
    )
})
