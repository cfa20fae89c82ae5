import { Singleton } from "@effect/cluster"
import { SqlClient } from "@effect/sql"
import { type Cause, Duration, Effect, FiberSet, Metric, Queue } from "effect"
import * as S from "../config/Settings.js"
import { outboxInFlight, outboxPublished } from "../observability/metrics.js"
import { OUTBOX_CHANNEL } from "../persistence/channels.js"
import { runWakeLoop } from "../persistence/WakeLoop.js"
import { EventQueue } from "../queue/EventQueue.js"

export const OutboxRelaySettings = S.area(
  "Outbox relay",
  "from the outbox table to the event queue (a cluster singleton)",
  {
    // at most 16 × 4,000 rows in flight: the read leaves them out by id, one bind parameter each (PostgreSQL: 65,535)
    batchSize: S.integer("OUTBOX_BATCH_SIZE", "outbox rows sent per batch", 256, { min: 1, max: 4000 }),
    batchesInFlight: S.integer(
      "OUTBOX_BATCHES_IN_FLIGHT",
      "batches sent side by side (one task's rows are never in two of them at once)",
      4,
      { min: 1, max: 16 }
    ),
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
 * runner goes. It reads unpublished rows in id order and sends them as a batch (key and FIFO group = task id; one
 * task's rows one after another, tasks side by side); once the queue has acknowledged every one, the batch's rows
 * are marked published. Batches overlap: while up to OUTBOX_BATCHES_IN_FLIGHT are being sent or marked, the relay
 * reads and sends the next rows (the read leaves out the rows in flight). One task's order holds because a task is
 * in one batch in flight at most: a row whose task has rows in flight waits, and is read again once they settled.
 * So a slow send no longer holds every event committed after it, only that batch's tasks' (before, an event committed
 * during a batch's send waited for that send's slowest message, then the mark, then its own send).
 *
 * At least once: a row is marked only after its send was acknowledged. A batch the queue refuses (or whose mark
 * fails) stays in flight, unmarked: the relay waits for the other batches, fails the drain, backs off and reads
 * everything unmarked again, in id order; a refused task's rows go again before its later ones. A mark that fails
 * leaves its rows to be sent again (the dispatcher drops what it has seen by task version). Woken by LISTEN/NOTIFY on
 * every outbox insert; a sweep every OUTBOX_SWEEP_INTERVAL is the safety net. No row locks: the singleton is the one
 * relay; a zombie relay during a handoff can only send duplicates.
 */
export const OutboxRelayLive = Singleton.make(
  "OutboxRelay",
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const queue = yield* EventQueue
    const { batchesInFlight, batchSize, maxBackoff, sweepInterval: sweep } = yield* OutboxRelaySettings.config

    // payload as text: it goes on as the message body, never parsed here (id, a bigint, arrives as a string; never
    // cast it in the select list: ORDER BY id would then sort the text, "10" before "9")
    const read = (inFlight: ReadonlyArray<string>) =>
      sql<Row>`
        SELECT id, event_id, aggregate_id, payload::text FROM outbox_events
        WHERE published_at IS NULL ${inFlight.length === 0 ? sql`` : sql`AND id NOT IN ${sql.in(inFlight)}`}
        ORDER BY id LIMIT ${batchSize}`

    const mark = (ids: ReadonlyArray<string>) =>
      sql`
        UPDATE outbox_events SET published_at = now(), publish_attempts = publish_attempts + 1
        WHERE id IN ${sql.in(ids)} AND published_at IS NULL`

    // the batches in flight: their rows (left out of reads until marked) and their tasks (whose next rows wait)
    const rowsInFlight = new Set<string>()
    const tasksInFlight = new Set<string>()
    // the first failure of a batch since the drain last gave up: its rows stay in flight until then
    let failure: Cause.Cause<unknown> | undefined
    // rows left unsent because their task was in flight: the batch's settling wakes the relay to read them again
    let leftBehind = false
    const slots = yield* Effect.makeSemaphore(batchesInFlight)
    const wake = yield* Queue.sliding<void>(1)
    const batches = yield* FiberSet.make()
    const gauge = Effect.suspend(() => Metric.set(outboxInFlight, rowsInFlight.size))

    const take = (rows: ReadonlyArray<Row>) =>
      Effect.zipRight(
        Effect.sync(() => rows.forEach((r) => (rowsInFlight.add(r.id), tasksInFlight.add(r.aggregate_id)))),
        gauge
      )
    const release = (rows: ReadonlyArray<Row>) =>
      Effect.zipRight(
        Effect.sync(() => rows.forEach((r) => (rowsInFlight.delete(r.id), tasksInFlight.delete(r.aggregate_id)))),
        gauge
      )

    const send = (rows: ReadonlyArray<Row>) =>
      queue.publish(
        rows.map((r) => ({ key: r.aggregate_id, group: r.aggregate_id, eventId: r.event_id, body: r.payload }))
      ).pipe(
        Effect.zipRight(mark(rows.map((r) => r.id))),
        Effect.zipRight(Effect.zipRight(Metric.incrementBy(outboxPublished, rows.length), release(rows))),
        Effect.catchAllCause((cause) => Effect.sync(() => void (failure ??= cause))),
        Effect.withSpan("OutboxRelay.batch", { attributes: { rows: rows.length } }),
        Effect.ensuring(Effect.zipRight(
          slots.release(1),
          Effect.suspend(() => {
            if (!leftBehind && failure === undefined) return Effect.void
            leftBehind = false
            return Queue.offer(wake, undefined)
          })
        ))
      )

    /** Once every batch settled: forgets the ones in flight (read again, unmarked) and fails with the first failure. */
    const giveUp = Effect.gen(function*() {
      yield* slots.withPermits(batchesInFlight)(Effect.void)
      const cause = failure!
      failure = undefined
      rowsInFlight.clear()
      tasksInFlight.clear()
      yield* gauge
      return yield* Effect.failCause(cause)
    })

    // reads and sends while reads find full batches; answers 0 (the wake loop then waits for a NOTIFY, a settled
    // batch that left rows behind, or the sweep), the batches going on meanwhile
    const drain = Effect.gen(function*() {
      for (;;) {
        if (failure !== undefined) return yield* giveUp
        const rows = yield* read([...rowsInFlight])
        const ready = rows.filter((r) => !tasksInFlight.has(r.aggregate_id))
        if (ready.length < rows.length) leftBehind = true
        if (ready.length > 0) {
          yield* slots.take(1)
          yield* take(ready)
          yield* FiberSet.run(batches, send(ready))
        }
        if (rows.length < batchSize || ready.length === 0) return 0
      }
    })

    return yield* runWakeLoop({
      name: "outbox relay",
      channel: OUTBOX_CHANNEL,
      sweep,
      batchSize,
      backoff: { base: Duration.millis(200), cap: maxBackoff },
      drain,
      wake
    })
  })
)
