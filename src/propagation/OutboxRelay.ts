import { Singleton } from "@effect/cluster"
import { SqlClient } from "@effect/sql"
import { Config, Duration, Effect } from "effect"
import { OUTBOX_CHANNEL } from "../persistence/channels.js"
import { runWakeLoop } from "../persistence/WakeLoop.js"
import { EventQueue } from "../queue/EventQueue.js"

/**
 * The outbox relay (seed 12.4 steps 8–9): a cluster singleton, so relays never fight and the relay moves when its
 * runner goes. It claims unpublished rows in id order (`FOR UPDATE SKIP LOCKED`: a zombie relay after a handoff
 * skips what the new one holds), publishes them (key and FIFO group = task id) and marks them published in the
 * same transaction. When the queue refuses, nothing is marked: the rows wait and the relay backs off; order per
 * task holds because a failed batch is retried whole before anything after it. Woken by LISTEN/NOTIFY on every
 * outbox insert; a sweep every OUTBOX_SWEEP_INTERVAL is the safety net.
 */
export const OutboxRelayLive = Singleton.make(
  "OutboxRelay",
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const queue = yield* EventQueue
    const batchSize = yield* Config.integer("OUTBOX_BATCH_SIZE").pipe(Config.withDefault(256))
    const sweep = yield* Config.duration("OUTBOX_SWEEP_INTERVAL").pipe(Config.withDefault(Duration.seconds(1)))
    const maxBackoff = yield* Config.duration("OUTBOX_MAX_BACKOFF").pipe(Config.withDefault(Duration.seconds(10)))

    const relayBatch = Effect.gen(function*() {
      const rows = yield* sql<{ id: number; event_id: string; aggregate_id: string; payload: unknown }>`
        SELECT id, event_id, aggregate_id, payload FROM outbox_events
        WHERE published_at IS NULL ORDER BY id LIMIT ${batchSize} FOR UPDATE SKIP LOCKED`
      if (rows.length === 0) return 0
      yield* queue.publish(rows.map((r) => ({
        key: r.aggregate_id,
        group: r.aggregate_id,
        eventId: r.event_id,
        body: JSON.stringify(r.payload)
      })))
      yield* sql`
        UPDATE outbox_events SET published_at = now(), publish_attempts = publish_attempts + 1
        WHERE id IN ${sql.in(rows.map((r) => r.id))}`
      return rows.length
    }).pipe(sql.withTransaction)

    return yield* runWakeLoop({
      name: "outbox relay",
      channel: OUTBOX_CHANNEL,
      sweep,
      batchSize,
      backoff: { base: Duration.millis(200), cap: maxBackoff },
      drain: relayBatch
    })
  })
)
