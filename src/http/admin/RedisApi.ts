import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { OperatorAuthentication } from "./OperatorAuth.js"

export class RedisConnectionView extends Schema.Class<RedisConnectionView>("RedisConnectionView")({
  connection: Schema.String.annotations({ description: "main (quotas, PUBLISH, probes) or bus-subscriber" }),
  status: Schema.String.annotations({ description: "ioredis' status: ready, connecting, reconnecting, …" }),
  master: Schema.NullOr(Schema.String).annotations({ description: "host:port it is (or was last) connected to" }),
  connects: Schema.Int.annotations({ description: "times it became ready: the first connect and every reconnect" }),
  master_switches: Schema.Int.annotations({ description: "reconnects that found another master than before" })
}) {}

export class RedisStatusView extends Schema.Class<RedisStatusView>("RedisStatusView")({
  mode: Schema.Literal("none", "url", "sentinel").annotations({
    description: "none: in-process quotas and bus; url: REDIS_URL; sentinel: REDIS_SENTINELS"
  }),
  target: Schema.NullOr(Schema.String).annotations({ description: "the configured Redis, without passwords" }),
  sentinel_master: Schema.NullOr(Schema.String).annotations({
    description: "the master the Sentinels name now (sentinel mode; null: none answered within 2 s)"
  }),
  sentinel_answered_by: Schema.NullOr(Schema.String),
  connections: Schema.Array(RedisConnectionView).annotations({
    description: "this runner's connections: after a failover, each should be on sentinel_master"
  })
}) {}

/** This runner's Redis: where it is, what the Sentinels say, its connections. */
export class RedisApi extends HttpApiGroup.make("redis")
  .add(
    HttpApiEndpoint.get("status", "/admin/redis")
      .addSuccess(RedisStatusView)
      .annotate(OpenApi.Description, "The answering runner's Redis connections, and the master the Sentinels name")
  )
  .middleware(OperatorAuthentication)
  .annotate(OpenApi.Description, "Redis and Sentinel (operator token)")
{}
