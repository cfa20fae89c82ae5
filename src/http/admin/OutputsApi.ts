import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { StorageUnavailable } from "../../schema/errors.js"
import { OperatorAuthentication } from "./OperatorAuth.js"

export class PendingOutputView extends Schema.Class<PendingOutputView>("PendingOutputView")({
  task_id: Schema.String,
  attempt_id: Schema.String,
  task_status: Schema.String.annotations({ description: "fetching_output, output_at_risk or processing_media" }),
  deadline_at: Schema.NullOr(Schema.Date).annotations({
    description: "the provider URL's deadline: past it, a missing output fails the task (output_unavailable)"
  }),
  fetch_status: Schema.NullOr(Schema.String).annotations({
    description: "the fetch_output operation: running (under a lease), retry, done, failed; null: not claimed yet"
  }),
  claims: Schema.Int.annotations({ description: "times the fetch was claimed (downloads started or skipped)" }),
  lease_until: Schema.NullOr(Schema.Date).annotations({ description: "while running: when its lease lapses" }),
  last_error: Schema.NullOr(Schema.String),
  updated_at: Schema.Date
}) {}

export class PendingOutputsView extends Schema.Class<PendingOutputsView>("PendingOutputsView")({
  outputs: Schema.Array(PendingOutputView)
}) {}

const Limit = Schema.Struct({
  limit: Schema.optional(Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 1000))).annotations({
    description: "at most this many (default 100)"
  })
})

/** Outputs on their way into the object store: what operators watch while a store or a provider's storage fails. */
export class OutputsApi extends HttpApiGroup.make("outputs")
  .add(
    HttpApiEndpoint.get("pending", "/admin/outputs").setUrlParams(Limit).addSuccess(PendingOutputsView)
      .addError(StorageUnavailable)
  )
  .middleware(OperatorAuthentication)
  .annotate(OpenApi.Description, "Outputs not yet stored and checked, the closest to their URL's deadline first")
{}
