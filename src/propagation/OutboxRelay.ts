import { Singleton } from "@effect/cluster"
import { SqlClient } from "@effect/sql"
import { Duration, Effect, Metric } from "effect"
import * as S from "../config/Settings.js"
import { outboxPublished } from "../observability/metrics.js"
import { OUTBOX_CHANNEL } from "../persistence/channels.js"
import { runWakeLoop } from "../persistence/WakeLoop.js"
import { EventQueue } from "../queue/EventQueue.js"

export const OutboxRelaySettings = S.area(
  "Outbox relay",
  "from the outbox table to the event queue (a cluster singleton)",
  {
    batchSize: S.integer("OUTBOX_BATCH_SIZE", "outbox rows published per transaction", 256, { min: 1 }),
    sweepInterval: S.duration(
      "OUTBOX_SWEEP_INTERVAL",
      "safety-net sweep of the outbox; LISTEN/NOTIFY wakes the relay on every insert otherwise",
      "1 second"
    ),
    maxBackoff: S.duration("OUTBOX_MAX_BACKOFF", "longest wait between tries while the queue refuses", "10 seconds")
  }
)

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
    const { batchSize, maxBackoff, sweepInterval: sweep } = yield* OutboxRelaySettings.config

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
    }).pipe(
      sql.withTransaction,
      Effect.tap((n) => Metric.incrementBy(outboxPublished, n))
    )

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
