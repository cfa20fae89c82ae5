import { SqlClient } from "@effect/sql"
import { Effect, Either, Layer, Metric, ParseResult, Schema } from "effect"
import { type BusMessage, NotificationBus } from "../bus/NotificationBus.js"
import * as S from "../config/Settings.js"
import { liveEventOf } from "../domain/taskEvents.js"
import { WriteFence } from "../persistence/WriteFence.js"
import { type Delivery, EventQueue } from "../queue/EventQueue.js"
import { DomainEvent } from "../schema/events.js"

/**
 * What the dispatcher reads of a domain event from the broker, decoded once with one compiled decoder: the fields of
 * the live notification and the project, each with its own schema (the ids, the status, stage, progress and error
 * code a browser will see). The rest of the event (tenant, user, attempt, source, region…) was validated where it
 * was written and is not read here, and the cursor goes on as the text the relay sent; re-decoding the whole event
 * cost 20–38 µs a message here (the UUID and cursor parsers), this about a third of it.
 */
const Dispatched = Schema.Struct({
  ...DomainEvent.pick(
    "event_type",
    "aggregate_id",
    "aggregate_version",
    "project_id",
    "status",
    "stage",
    "progress",
    "asset_id",
    "error_code",
    "occurred_at",
    "trace_id"
  ).fields,
  cursor: Schema.String
})
const decodeEvent = Schema.decodeUnknownEither(Schema.parseJson(Dispatched))

/** "aggregate_id: is missing; status: Expected …" (the first three issues), for the log and the dead letter. */
const unreadable = (error: ParseResult.ParseError) =>
  ParseResult.ArrayFormatter.formatErrorSync(error).slice(0, 3).map((i) =>
    `${i.path.length === 0 ? "body" : i.path.join(".")}: ${i.message}`
  ).join("; ")

const pushesPaused = Metric.counter("notifications_paused_total", {
  description: "events not pushed live because the mode pauses live notifications (clients read them by snapshot)"
})

export const DispatcherSettings = S.area(
  "Notification dispatcher",
  "from the event queue to the bus, on every runner",
  {
    enabled: S.boolean(
      "NOTIFICATION_DISPATCHER_ENABLED",
      "this runner consumes the event queue and feeds the bus",
      true
    ),
    group: S.string(
      "DISPATCHER_GROUP",
      "the event queue's consumer group of the dispatchers",
      "notification-dispatcher"
    ),
    maxAttempts: S.integer(
      "DISPATCH_MAX_ATTEMPTS",
      "publishes of one event to the bus before it goes to notification_dead_letters",
      10,
      { min: 1 }
    ),
    dedupTasks: S.integer(
      "DISPATCH_DEDUP_TASKS",
      "tasks whose last published version is remembered, to drop redeliveries (least recently used forgotten)",
      100_000,
      { min: 1 }
    )
  }
)

/**
 * The notification dispatcher (seed 12.4 step 10): a consumer of the event queue's group
 * DISPATCHER_GROUP on every runner. It takes the queue's batches (one message per task): each domain event is
 * decoded, de-duplicated by (task id, version) — one task's events arrive in order, so anything at or below the last
 * version published for that task is a redelivery — and the batch is published as LiveTaskEvents to the projects'
 * bus channels in one Redis pipeline; each message is acked only after its publish. A publish that keeps failing
 * (DISPATCH_MAX_ATTEMPTS) and an unreadable message go to notification_dead_letters, to list and replay
 * (npm run ops -- dead-letters list|replay); either way no fact is lost: gateways re-read PostgreSQL by cursor.
 * One span per batch, none per message.
 */
export const NotificationDispatcherLive = Layer.scopedDiscard(Effect.gen(function*() {
  const { dedupTasks: remembered, enabled, group, maxAttempts } = yield* DispatcherSettings.config
  if (!enabled) return
  const sql = yield* SqlClient.SqlClient
  const queue = yield* EventQueue
  const bus = yield* NotificationBus
  const fence = yield* WriteFence
  // highest version published per task, least recently used first (a Map keeps insertion order)
  const published = new Map<string, number>()

  /** Records the message in notification_dead_letters; true once it is there (then it is acked). */
  const deadLetter = (d: Delivery, taskId: string, error: string) =>
    Effect.zipRight(
      Effect.logError("notification sent to the dead letters").pipe(
        Effect.annotateLogs({ event_id: d.eventId, task_id: taskId, attempt: d.attempt, error })
      ),
      sql`
        INSERT INTO notification_dead_letters (event_id, task_id, body, error, attempts)
        VALUES (${d.eventId}, ${taskId}, ${d.body}, ${error}, ${d.attempt})
        ON CONFLICT (event_id) DO NOTHING`
    ).pipe(
      Effect.as(true),
      Effect.catchAllCause((cause) =>
        Effect.logError("dead letter not recorded; redelivering", cause).pipe(
          Effect.annotateLogs({ event_id: d.eventId }),
          Effect.as(false)
        )
      )
    )

  const dispatch = Effect.fn("NotificationDispatcher.dispatch")(function*(deliveries: ReadonlyArray<Delivery>) {
    yield* Effect.annotateCurrentSpan("messages", deliveries.length)
    const done: Array<boolean> = deliveries.map(() => true)
    // DEGRADED_NOTIFY, MAINTENANCE: acked without a push. Nothing is lost: the event is in task_events, where a
    // client's snapshot (and its cursor replay, once streams open again) reads it
    const live = yield* fence.allows("liveNotifications")
    const outgoing: Array<BusMessage> = []
    const sent: Array<{ readonly index: number; readonly taskId: string; readonly version: number }> = []
    for (const [index, d] of deliveries.entries()) {
      const decoded = decodeEvent(d.body)
      if (Either.isLeft(decoded)) {
        const error = `unreadable: ${unreadable(decoded.left)}`
        done[index] = yield* deadLetter(d, d.key, error)
        continue
      }
      const e = decoded.right
      if (!live) continue
      const last = published.get(e.aggregate_id)
      if (last !== undefined && e.aggregate_version <= last) continue
      outgoing.push({ projectId: e.project_id, payload: JSON.stringify(liveEventOf(e)) })
      sent.push({ index, taskId: e.aggregate_id, version: e.aggregate_version })
    }
    if (!live) yield* Metric.incrementBy(pushesPaused, deliveries.length)
    if (outgoing.length === 0) return done
    const outcomes = yield* bus.publishMany(outgoing)
    for (const [i, { index, taskId, version }] of sent.entries()) {
      const failed = outcomes[i]
      if (failed === undefined) {
        published.delete(taskId)
        published.set(taskId, version)
        if (published.size > remembered) published.delete(published.keys().next().value!)
        continue
      }
      const d = deliveries[index]!
      done[index] = d.attempt >= maxAttempts ? yield* deadLetter(d, taskId, failed.message) : false
    }
    const failures = done.filter((ok) => !ok).length
    if (failures > 0) {
      yield* Effect.logWarning("bus publish failed; redelivering").pipe(
        Effect.annotateLogs({ failed: failures, batch: deliveries.length, error: outcomes.find((o) => o)?.message })
      )
    }
    return done
  })

  // runs once the consumer stopped (its receives ended and handed back what they held): on a runner's stop, after the
  // cluster handed the shards over (Runner.ts layerPropagationFor)
  yield* Effect.addFinalizer(() => Effect.logInfo(`notification dispatcher stopped (${group})`))
  yield* queue.consume(group, dispatch)
}))
