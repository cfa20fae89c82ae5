import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Effect } from "effect"
import { ClusterView } from "../../cluster/ClusterView.js"
import { storageUnavailable } from "../../persistence/storageUnavailable.js"
import { ControlPlaneApi } from "../Api.js"
import { ClusterStatusView, RunnerView, ShardsView, ShardView } from "./ClusterApi.js"
import { Operator } from "./OperatorAuth.js"

const unavailable = storageUnavailable("cluster admin")

export const ClusterHttpLive = HttpApiBuilder.group(ControlPlaneApi, "cluster", (handlers) =>
  Effect.gen(function*() {
    const view = yield* ClusterView
    return handlers
      .handle("status", () =>
        view.status.pipe(
          Effect.map((s) => new ClusterStatusView({ ...s, runners: s.runners.map((r) => new RunnerView(r)) })),
          Effect.catchTag("SqlError", unavailable)
        ))
      .handle("shards", () =>
        view.shards.pipe(
          Effect.map((m) => new ShardsView({ shards: m.shards.map((s) => new ShardView(s)) })),
          Effect.catchTag("SqlError", unavailable)
        ))
      .handle("drain", ({ path }) =>
        Effect.flatMap(Operator, (o) => view.drain(path.address, o.operator)).pipe(
          Effect.catchTag("SqlError", unavailable)
        ))
      .handle("undrain", ({ path }) =>
        Effect.flatMap(Operator, (o) => view.undrain(path.address, o.operator)).pipe(
          Effect.catchTag("SqlError", unavailable)
        ))
      .handle("weight", ({ path, payload }) =>
        Effect.flatMap(Operator, (o) =>
          view.setWeight(path.address, payload.weight, o.operator)).pipe(
            Effect.catchTag("SqlError", unavailable)
          ))
  }))
