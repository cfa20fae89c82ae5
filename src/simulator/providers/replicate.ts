import * as HttpRouter from "@effect/platform/HttpRouter"
import { Either, Schema } from "effect"
import type { Prediction } from "replicate"
import {
  decodeStrict,
  outcomeOf,
  outputUrl,
  type Refused,
  type SimulatedProvider,
  standardHeaders,
  type Validate
} from "../SimulatedProvider.js"
import type { Job, Phase } from "../SimulatorState.js"

// { version | (owner/name in the path), input, webhook, webhook_events_filter }; 422 problem details
const Create = Schema.Struct({
  version: Schema.optional(Schema.String.pipe(Schema.pattern(/^[a-f0-9]{64}$/))),
  input: Schema.Record({ key: Schema.String, value: Schema.Unknown }),
  webhook: Schema.optional(Schema.String.pipe(Schema.pattern(/^https?:\/\//))),
  webhook_events_filter: Schema.optional(Schema.Array(Schema.Literal("start", "output", "logs", "completed"))),
  stream: Schema.optional(Schema.Boolean)
})

const validate: Validate = (i) => {
  const refuse = (detail: string): Refused => ({ status: 422, body: { title: "Invalid input", detail, status: 422 } })
  return Either.flatMap(decodeStrict(Create, i.body, refuse), (b) =>
    b.version === undefined && i.model === undefined
      ? Either.left(refuse("version is required (or POST /v1/models/{owner}/{name}/predictions)"))
      : Either.right({ model: i.model ?? b.version!, webhookUrl: b.webhook ?? null }))
}

const render = (job: Job, phase: Phase) => {
  const done = outcomeOf(phase)
  return {
    id: job.id,
    model: job.model,
    version: "hidden",
    input: {},
    source: "api",
    data_removed: false,
    status: phase._tag === "queued" ? "starting" : phase._tag === "running" ? "processing" : done!,
    output: done === "succeeded" ? outputUrl(job) : null,
    error: done === "failed" ? "generation failed" : null,
    created_at: new Date(job.createdAt).toISOString(),
    ...(done ? { completed_at: new Date().toISOString() } : {}),
    urls: { get: `/v1/predictions/${job.id}`, cancel: `/v1/predictions/${job.id}/cancel` }
  } satisfies Prediction
}

/** Replicate: the prediction itself is the webhook body, at start and at the end (the filter we send). */
export const replicate: SimulatedProvider = {
  name: "replicate",
  jobId: () => `replicate-${crypto.randomUUID()}`,
  render,
  webhook: (job, phase, signers, seq) => {
    if (job.webhookUrl === null || phase._tag === "queued") return null
    const body = JSON.stringify(render(job, phase))
    return {
      url: job.webhookUrl,
      body,
      headers: standardHeaders(signers.replicateSecret, `msg_${job.id}_${seq}`, body)
    }
  },
  cancelAnswersEmpty: false,
  routes: (api) =>
    HttpRouter.empty.pipe(
      HttpRouter.post("/replicate/v1/predictions", api.submit({ validate })),
      HttpRouter.post(
        "/replicate/v1/models/:owner/:name/predictions",
        api.submit({ validate, modelOf: (p) => `${p.owner}/${p.name}` })
      ),
      HttpRouter.get("/replicate/v1/predictions/:id", api.job()),
      HttpRouter.post("/replicate/v1/predictions/:id/cancel", api.cancel)
    )
}
