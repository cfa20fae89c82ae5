import { Singleton } from "@effect/cluster"
import { SqlClient } from "@effect/sql"
import { Duration, Effect, Exit, Fiber, Metric, Option } from "effect"
import * as S from "../config/Settings.js"
import { outboxPublished } from "../observability/metrics.js"
import { OUTBOX_CHANNEL } from "../persistence/channels.js"
import { runWakeLoop } from "../persistence/WakeLoop.js"
import { EventQueue } from "../queue/EventQueue.js"

export const OutboxRelaySettings = S.area(
  "Outbox relay",
  "from the outbox table to the event queue (a cluster singleton)",
  {
    batchSize: S.integer("OUTBOX_BATCH_SIZE", "outbox rows sent per batch", 256, { min: 1 }),
    sweepInterval: S.duration(
      "OUTBOX_SWEEP_INTERVAL",
      "safety-net sweep of the outbox; LISTEN/NOTIFY wakes the relay on every insert otherwise",
      "1 second"
    ),
    maxBackoff: S.duration("OUTBOX_MAX_BACKOFF", "longest wait between tries while the queue refuses", "10 seconds")
  }
)

interface Row {
  readonly id: string
  readonly event_id: string
  readonly aggregate_id: string
  readonly payload: string
}

/**
 * The outbox relay (seed 12.4 steps 8–9): a cluster singleton, so relays do not fight and the relay moves when its
 * runner goes. It reads unpublished rows in id order, sends them as one batch (key and FIFO group = task id; one
 * task's rows one after another, tasks side by side) and marks them published once the queue has acknowledged every
 * one. Sending and marking overlap: while batch k is marked in PostgreSQL, batch k+1 is read (without k's rows) and
 * sent; k+2 waits for k's mark. At least once: a row is marked only after its send was acknowledged; a batch the
 * queue refuses is not marked, and the relay backs off and reads it again, whole, before anything after it, so one
 * task's order holds. A mark that fails leaves its rows to be sent again (the dispatcher drops what it has seen by
 * task version). Woken by LISTEN/NOTIFY on every outbox insert; a sweep every OUTBOX_SWEEP_INTERVAL is the safety
 * net. No row locks: the singleton is the one relay; a zombie relay during a handoff can only send duplicates.
 */
export const OutboxRelayLive = Singleton.make(
  "OutboxRelay",
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const queue = yield* EventQueue
    const { batchSize, maxBackoff, sweepInterval: sweep } = yield* OutboxRelaySettings.config

    // the batch being marked (sent already): the next read skips its rows
    let marking: { readonly ids: ReadonlyArray<string>; readonly fiber: Fiber.Fiber<void, unknown> } | undefined

    // payload as text: it goes on as the message body, never parsed here (id, a bigint, arrives as a string; never
    // cast it in the select list: ORDER BY id would then sort the text, "10" before "9")
    const unpublished = (skip: ReadonlyArray<string>) =>
      skip.length === 0
        ? sql<Row>`
          SELECT id, event_id, aggregate_id, payload::text FROM outbox_events
          WHERE published_at IS NULL ORDER BY id LIMIT ${batchSize}`
        : sql<Row>`
          SELECT id, event_id, aggregate_id, payload::text FROM outbox_events
          WHERE published_at IS NULL AND id NOT IN ${sql.in(skip)} ORDER BY id LIMIT ${batchSize}`

    const mark = (ids: ReadonlyArray<string>) =>
      sql`
        UPDATE outbox_events SET published_at = now(), publish_attempts = publish_attempts + 1
        WHERE id IN ${sql.in(ids)} AND published_at IS NULL`.pipe(
        Effect.zipRight(Metric.incrementBy(outboxPublished, ids.length)),
        Effect.withSpan("OutboxRelay.mark", { attributes: { rows: ids.length } })
      )

    /** Waits for the batch being marked; a failed mark is forgotten, so its rows are read (and sent) again. */
    const marked = Effect.suspend(() => {
      const previous = marking
      if (previous === undefined) return Effect.void
      return Fiber.join(previous.fiber).pipe(Effect.ensuring(Effect.sync(() => (marking = undefined))))
    })

    const relayBatch = Effect.gen(function*() {
      // a mark that failed already: its rows go out again before anything after them
      if (marking !== undefined && Option.exists(yield* Fiber.poll(marking.fiber), Exit.isFailure)) yield* marked
      const rows = yield* unpublished(marking?.ids ?? [])
      if (rows.length === 0) {
        yield* marked
        return 0
      }
      yield* queue.publish(
        rows.map((r) => ({ key: r.aggregate_id, group: r.aggregate_id, eventId: r.event_id, body: r.payload }))
      )
      // sent: mark it in the background once the batch before it is marked (one mark at a time)
      yield* marked
      const ids = rows.map((r) => r.id)
      marking = { ids, fiber: yield* Effect.fork(mark(ids)) }
      return rows.length
    }).pipe(Effect.withSpan("OutboxRelay.batch"))

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
