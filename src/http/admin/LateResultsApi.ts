import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { StorageUnavailable } from "../../schema/errors.js"
import { OperatorAuthentication } from "./OperatorAuth.js"

export class LateResultView extends Schema.Class<LateResultView>("LateResultView")({
  id: Schema.Int,
  task_id: Schema.String,
  attempt_id: Schema.String,
  attempt_no: Schema.Int,
  provider: Schema.String,
  provider_task_id: Schema.NullOr(Schema.String),
  model: Schema.String,
  status: Schema.String,
  error_class: Schema.NullOr(Schema.String),
  error_code: Schema.NullOr(Schema.String),
  output_refs_count: Schema.Int,
  source: Schema.String,
  received_at: Schema.Date,
  trace_id: Schema.String
}) {}

export class LateResultsView extends Schema.Class<LateResultsView>("LateResultsView")({
  rows: Schema.Array(LateResultView)
}) {}

export const LateResultsQuery = Schema.Struct({
  /** received at or after this instant (ISO 8601) */
  since: Schema.optional(Schema.DateFromString.pipe(Schema.filter((d) => !Number.isNaN(d.getTime()), {
    message: () => "since must be an ISO 8601 date-time"
  }))),
  provider: Schema.optional(Schema.String.pipe(Schema.pattern(/^[a-z0-9_-]{1,40}$/))),
  limit: Schema.optional(Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 1000)))
})

/** Late terminal results of superseded attempts, for cost reconciliation (seed 12.7.3). */
export class LateResultsApi extends HttpApiGroup.make("lateResults")
  .add(
    HttpApiEndpoint.get("list", "/admin/late-results").setUrlParams(LateResultsQuery).addSuccess(LateResultsView)
      .addError(StorageUnavailable)
  )
  .middleware(OperatorAuthentication)
  .annotate(
    OpenApi.Description,
    "Terminal results of attempts that were no longer current: never applied, kept for cost reconciliation"
  )
{}
