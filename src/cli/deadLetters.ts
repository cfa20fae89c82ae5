import { NodeRuntime } from "@effect/platform-node"
import { Console, Effect, Layer, Schema } from "effect"
import * as Bus from "../bus/NotificationBus.js"
import * as Database from "../persistence/Database.js"
import { listDeadLetters, replayDeadLetters } from "../propagation/DeadLetters.js"
import * as Redis from "../redis/Redis.js"

/** npm run dead-letters -- list | replay <id>|all: the notifications the dispatcher gave up on. */
const Args = Schema.Union(
  Schema.Tuple(Schema.Literal("list")),
  Schema.Tuple(Schema.Literal("replay"), Schema.Union(Schema.Literal("all"), Schema.NumberFromString))
)

const program = Effect.gen(function*() {
  const args = yield* Schema.decodeUnknown(Args)(process.argv.slice(2)).pipe(
    Effect.mapError(() => new Error("usage: npm run dead-letters -- list | replay <id>|all"))
  )
  if (args[0] === "list") {
    const rows = yield* listDeadLetters
    for (const r of rows) yield* Console.log(`${r.id}\t${r.event_id}\ttask ${r.task_id}\t${r.attempts}×\t${r.error}`)
    return yield* Console.log(`${rows.length} open dead letters`)
  }
  yield* Console.log(`${yield* replayDeadLetters(args[1])} replayed`)
})

program.pipe(
  Effect.provide(Layer.mergeAll(Database.layerFromEnv, Bus.layerFromEnv.pipe(Layer.provide(Redis.layerFromEnv)))),
  NodeRuntime.runMain
)
