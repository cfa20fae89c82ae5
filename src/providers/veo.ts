import { Schema } from "effect"
import type { ProviderReport } from "./ProviderAdapter.js"

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
