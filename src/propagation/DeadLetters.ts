import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"
import { NotificationBus } from "../bus/NotificationBus.js"
import { liveEventOf } from "../domain/taskEvents.js"
import { DomainEvent } from "../schema/events.js"

export interface DeadLetter {
  readonly id: number
  readonly event_id: string
  readonly task_id: string
  readonly error: string
  readonly attempts: number
  readonly created_at: Date
}

/** The notifications the dispatcher gave up on and nobody replayed yet, oldest first. */
export const listDeadLetters = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql<DeadLetter>`
    SELECT id, event_id, task_id, error, attempts, created_at FROM notification_dead_letters
    WHERE replayed_at IS NULL ORDER BY id`)

/**
 * Publishes dead letters to their project's channel again and marks them replayed (browsers ignore versions they
 * already have). A body that still cannot be read fails the replay and stays listed.
 */
export const replayDeadLetters = (which: number | "all") =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const bus = yield* NotificationBus
    const rows = yield* sql<{ id: number; body: string }>`
      SELECT id, body FROM notification_dead_letters
      WHERE replayed_at IS NULL AND (${which === "all"} OR id = ${which === "all" ? 0 : which}) ORDER BY id`
    for (const r of rows) {
      const event = yield* Schema.decodeUnknown(Schema.parseJson(DomainEvent))(r.body)
      yield* bus.publish(event.project_id, JSON.stringify(liveEventOf(event)))
      yield* sql`UPDATE notification_dead_letters SET replayed_at = now() WHERE id = ${r.id}`
    }
    return rows.length
  })
