import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { OperatorAuthentication } from "./OperatorAuth.js"

export class OperatorView extends Schema.Class<OperatorView>("OperatorView")({
  operator: Schema.String
}) {}

/** The admin API's own endpoints: who the token belongs to (the operator page checks its token with it). */
export class AdminApi extends HttpApiGroup.make("admin")
  .add(HttpApiEndpoint.get("whoami", "/admin/whoami").addSuccess(OperatorView))
  .middleware(OperatorAuthentication)
  .annotate(OpenApi.Description, "Operators: an operator token (npm run token -- --operator NAME), never a tenant's")
{}
