import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { LastRunner, RunnerNotFound } from "../../schema/clusterErrors.js"
import { StorageUnavailable } from "../../schema/errors.js"
import { OperatorAuthentication } from "./OperatorAuth.js"

export class RunnerView extends Schema.Class<RunnerView>("RunnerView")({
  address: Schema.String.annotations({
    description: "host:port of the runner-to-runner socket (RUNNER_HOST:RUNNER_PORT)"
  }),
  healthy: Schema.Boolean.annotations({ description: "the cluster's health check reaches it" }),
  draining: Schema.Boolean.annotations({ description: "drained by an operator: it owns no shards, still serves HTTP" }),
  weight: Schema.Number.annotations({ description: "its share of shards relative to the others (0: none)" }),
  shards: Schema.Int.annotations({ description: "shards it holds now (their locks)" }),
  entities: Schema.NullOr(Schema.Int).annotations({
    description: "entities it runs, as it last reported (null: no fresh report)"
  }),
  singletons: Schema.Array(Schema.String).annotations({ description: "cluster singletons it runs" })
}) {}

export class ClusterStatusView extends Schema.Class<ClusterStatusView>("ClusterStatusView")({
  runners: Schema.Array(RunnerView),
  shards_per_group: Schema.Int,
  groups: Schema.Array(Schema.String)
}) {}

export class ShardView extends Schema.Class<ShardView>("ShardView")({
  group: Schema.String,
  id: Schema.Int,
  runner: Schema.NullOr(Schema.String).annotations({ description: "the runner holding it; null: nobody (moving)" })
}) {}

export class ShardsView extends Schema.Class<ShardsView>("ShardsView")({
  shards: Schema.Array(ShardView)
}) {}

const RunnerPath = Schema.Struct({
  address: Schema.String.pipe(Schema.pattern(/^\S+:\d{1,5}$/)).annotations({
    description: "the runner's host:port, URL-encoded",
    message: () => ({ message: "must be host:port", override: true })
  })
})

export const WeightRequest = Schema.Struct({
  weight: Schema.Int.pipe(Schema.between(0, 1000)).annotations({
    description: "0 to 1000; 0 takes every shard away, like a drain"
  })
})

/** Runners and shards: status, the shard map, drain, weights. */
export class ClusterApi extends HttpApiGroup.make("cluster")
  .add(HttpApiEndpoint.get("status", "/admin/cluster").addSuccess(ClusterStatusView).addError(StorageUnavailable))
  .add(HttpApiEndpoint.get("shards", "/admin/shards").addSuccess(ShardsView).addError(StorageUnavailable))
  .add(
    HttpApiEndpoint.post("drain", "/admin/runners/:address/drain")
      .setPath(RunnerPath)
      .addSuccess(Schema.Void, { status: 204 })
      .addError(RunnerNotFound)
      .addError(LastRunner)
      .addError(StorageUnavailable)
      .annotate(OpenApi.Description, "Moves every shard off the runner; it keeps serving HTTP. Survives its restart.")
  )
  .add(
    HttpApiEndpoint.post("undrain", "/admin/runners/:address/undrain")
      .setPath(RunnerPath)
      .addSuccess(Schema.Void, { status: 204 })
      .addError(RunnerNotFound)
      .addError(StorageUnavailable)
  )
  .add(
    HttpApiEndpoint.put("weight", "/admin/runners/:address/weight")
      .setPath(RunnerPath)
      .setPayload(WeightRequest)
      .addSuccess(Schema.Void, { status: 204 })
      .addError(RunnerNotFound)
      .addError(LastRunner)
      .addError(StorageUnavailable)
      .annotate(OpenApi.Description, "Sets the runner's shard weight (over its RUNNER_WEIGHT) until set again.")
  )
  .middleware(OperatorAuthentication)
  .annotate(OpenApi.Description, "Runners and shards (operator token)")
{}
