import { HttpApiGroup, OpenApi } from "@effect/platform"
import { OperatorAuthentication } from "./OperatorAuth.js"

/** System mode and write epoch, inbox and dead letters, manual review and reconciliations. */
export class OperationsApi extends HttpApiGroup.make("operations")
  .middleware(OperatorAuthentication)
  .annotate(OpenApi.Description, "Modes, epoch, dead letters, manual review (operator token)")
{}
