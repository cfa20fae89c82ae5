import { HttpApiGroup, OpenApi } from "@effect/platform"
import { OperatorAuthentication } from "./OperatorAuth.js"

/** Runners and shards: status, the shard map, drain, weights. */
export class ClusterApi extends HttpApiGroup.make("cluster")
  .middleware(OperatorAuthentication)
  .annotate(OpenApi.Description, "Runners and shards (operator token)")
{}
