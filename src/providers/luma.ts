import { Schema } from "effect"
import { parseWith, type ProviderReport, type WebhookProtocol } from "./ProviderAdapter.js"

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
