import { Command } from "@effect/cli"
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import { Console, Effect, Logger, LogLevel } from "effect"
import { AdminClient, describeFailure, layerAdminClient } from "./ops/AdminClient.js"
import { breakerCommands } from "./ops/breakerCommands.js"
import { clusterCommands } from "./ops/clusterCommands.js"
import { lateResults } from "./ops/lateResultsCommands.js"
import { operationsCommands } from "./ops/operationsCommands.js"
import { outputsCommands } from "./ops/outputsCommands.js"
import { redisCommands } from "./ops/redisCommands.js"
import { streams } from "./ops/streamCommands.js"
import { token } from "./ops/tokenCommands.js"

/**
 * npm run ops -- <command>: operate a running runner through its admin API (OPS_URL, OPS_TOKEN). Every command has
 * --help; a failure is one line on stderr and exit code 1.
 */
const whoami = Command.make("whoami", {}, () =>
  Effect.gen(function*() {
    const client = yield* AdminClient
    const me = yield* client.admin.whoami()
    yield* Console.log(me.operator)
  })).pipe(Command.withDescription("the operator the token names (checks the token and the URL)"))

const ops = Command.make("ops").pipe(
  Command.withDescription("operate the task-status control plane through a runner's admin API"),
  Command.withSubcommands([
    whoami,
    ...clusterCommands,
    ...operationsCommands,
    ...outputsCommands,
    ...redisCommands,
    lateResults,
    streams,
    token,
    ...breakerCommands
  ])
)

const cli = Command.run(ops, { name: "ops", version: "0.1.0" })

cli(process.argv).pipe(
  Effect.provide(layerAdminClient),
  Effect.provide(NodeContext.layer),
  Effect.provide(Logger.minimumLogLevel(LogLevel.Error)),
  Effect.catchAllCause((cause) =>
    Effect.sync(() => {
      process.stderr.write(`ops: ${describeFailure(cause)}\n`)
      process.exitCode = 1
    })
  ),
  NodeRuntime.runMain({ disableErrorReporting: true })
)
