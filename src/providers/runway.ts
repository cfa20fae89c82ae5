import { Schema } from "effect"
import type { ProviderReport } from "./ProviderAdapter.js"
import { percent } from "./ProviderAdapter.js"

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
