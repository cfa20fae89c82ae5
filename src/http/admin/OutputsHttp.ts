import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Effect } from "effect"
import { TaskOperations } from "../../persistence/TaskOperations.js"
import { ControlPlaneApi } from "../Api.js"
import { PendingOutputsView, PendingOutputView } from "./OutputsApi.js"

export const OutputsHttpLive = HttpApiBuilder.group(ControlPlaneApi, "outputs", (handlers) =>
  Effect.gen(function*() {
    const operations = yield* TaskOperations
    return handlers.handle("pending", ({ urlParams }) =>
      Effect.map(
        operations.pendingOutputs(urlParams.limit ?? 100),
        (rows) => new PendingOutputsView({ outputs: rows.map((r) => new PendingOutputView(r)) })
      ))
  }))
