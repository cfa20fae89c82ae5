import { NodeRuntime } from "@effect/platform-node"
import { SqlClient } from "@effect/sql"
import { Console, Effect, Layer, Schema } from "effect"
import { NotificationBus } from "../bus/NotificationBus.js"
import * as Bus from "../bus/NotificationBus.js"
import * as Database from "../persistence/Database.js"
import * as Redis from "../redis/Redis.js"
import { DomainEvent } from "../schema/events.js"
import { liveEventOf } from "./NotificationDispatcher.js"

/**
 * npm run dead-letters -- list | replay <id>|all — the notifications the dispatcher gave up on. A replay publishes
 * the event to its project's channel again and marks the row replayed (browsers ignore versions they already have).
 */
const Args = Schema.Union(
  Schema.Tuple(Schema.Literal("list")),
  Schema.Tuple(Schema.Literal("replay"), Schema.Union(Schema.Literal("all"), Schema.NumberFromString))
)

const program = Effect.gen(function*() {
  const args = yield* Schema.decodeUnknown(Args)(process.argv.slice(2)).pipe(
    Effect.mapError(() => new Error("usage: npm run dead-letters -- list | replay <id>|all"))
  )
  const sql = yield* SqlClient.SqlClient
  if (args[0] === "list") {
    const rows = yield* sql<{ id: number; event_id: string; task_id: string; error: string; attempts: number }>`
      SELECT id, event_id, task_id, error, attempts FROM notification_dead_letters
      WHERE replayed_at IS NULL ORDER BY id`
    for (const r of rows) yield* Console.log(`${r.id}\t${r.event_id}\ttask ${r.task_id}\t${r.attempts}×\t${r.error}`)
    return yield* Console.log(`${rows.length} open dead letters`)
  }
  const bus = yield* NotificationBus
  const rows = yield* sql<{ id: number; body: string }>`
    SELECT id, body FROM notification_dead_letters
    WHERE replayed_at IS NULL AND (${args[1] === "all"} OR id = ${args[1] === "all" ? 0 : args[1]}) ORDER BY id`
  for (const r of rows) {
    const event = yield* Schema.decodeUnknown(Schema.parseJson(DomainEvent))(r.body)
    yield* bus.publish(event.project_id, JSON.stringify(liveEventOf(event)))
    yield* sql`UPDATE notification_dead_letters SET replayed_at = now() WHERE id = ${r.id}`
  }
  yield* Console.log(`${rows.length} replayed`)
})

program.pipe(
  Effect.provide(Layer.mergeAll(Database.layerFromEnv, Bus.layerFromEnv.pipe(Layer.provide(Redis.layerFromEnv)))),
  NodeRuntime.runMain
)
