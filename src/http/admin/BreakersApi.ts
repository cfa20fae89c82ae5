import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { NotFound, OperationRefused, StorageUnavailable } from "../../schema/errors.js"
import { OperatorAuthentication } from "./OperatorAuth.js"

const BreakerStateName = Schema.Literal("closed", "half_open", "open")

export class BreakerRow extends Schema.Class<BreakerRow>("BreakerRow")({
  provider: Schema.String,
  /** `*`: the provider credential's breaker (401/403), on the runner that answers */
  model: Schema.String,
  state: BreakerStateName,
  since: Schema.Date,
  /** open: when it may half-open */
  until: Schema.NullOr(Schema.Date),
  /** opens since the last close (the cool-down doubles with each) */
  trips: Schema.Int,
  /** calls and faults in the current window (closed) */
  calls: Schema.Int,
  faults: Schema.Int,
  /** redis: shared by all runners; local: the answering runner's own while Redis fails; credential: 401/403 */
  source: Schema.Literal("redis", "local", "credential")
}) {}

export class BreakersView extends Schema.Class<BreakersView>("BreakersView")({
  /** false: Redis did not answer, these are the answering runner's local breakers only */
  shared: Schema.Boolean,
  breakers: Schema.Array(BreakerRow)
}) {}

export class ResetBreakerBody extends Schema.Class<ResetBreakerBody>("ResetBreakerBody")({
  provider: Schema.String.pipe(Schema.pattern(/^[a-z0-9_-]{1,40}$/)),
  /** one model's breaker (`*`: the credential's); omitted: every breaker of the provider */
  model: Schema.optional(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(200))),
  reason: Schema.Trim.pipe(Schema.minLength(1), Schema.maxLength(500))
}) {}

export class ResetBreaker extends Schema.Class<ResetBreaker>("ResetBreaker")({
  provider: Schema.String,
  model: Schema.String,
  from: BreakerStateName
}) {}

export class ResetBreakersView extends Schema.Class<ResetBreakersView>("ResetBreakersView")({
  reset: Schema.Array(ResetBreaker)
}) {}

/** The provider breakers (src/quota/ProviderBreaker.ts): their states, and an operator's reset (force-close). */
export class BreakersApi extends HttpApiGroup.make("breakers")
  .add(HttpApiEndpoint.get("list", "/admin/breakers").addSuccess(BreakersView))
  .add(
    HttpApiEndpoint.post("reset", "/admin/breakers/reset").setPayload(ResetBreakerBody).addSuccess(ResetBreakersView)
      .addError(NotFound).addError(OperationRefused).addError(StorageUnavailable)
  )
  .middleware(OperatorAuthentication)
  .annotate(OpenApi.Description, "Provider breakers: states per provider and model, reset (operator token)")
{}
