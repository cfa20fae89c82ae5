import { SqlClient } from "@effect/sql"
import { Effect, Either, Layer, Metric, ParseResult, Schema } from "effect"
import { NotificationBus } from "../bus/NotificationBus.js"
import * as S from "../config/Settings.js"
import { liveEventOf } from "../domain/taskEvents.js"
import { WriteFence } from "../persistence/WriteFence.js"
import { type Delivery, EventQueue } from "../queue/EventQueue.js"
import { DomainEvent } from "../schema/events.js"

const decodeEvent = Schema.decodeUnknownEither(Schema.parseJson(DomainEvent))

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
 * DISPATCHER_GROUP on every runner. Each domain event is decoded, de-duplicated by (task id, version) — one task's
 * events arrive in order, so anything at or below the last version published for that task is a redelivery —
 * published as a LiveTaskEvent to the project's bus channel, and acked only after the publish. A publish that
 * keeps failing (DISPATCH_MAX_ATTEMPTS) and an unreadable message go to notification_dead_letters, to list and
 * replay (npm run ops -- dead-letters list|replay); either way no fact is lost: gateways re-read PostgreSQL by cursor.
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

  const deadLetter = (d: Delivery, taskId: string, error: string) =>
    Effect.zipRight(
      Effect.logError("notification sent to the dead letters").pipe(
        Effect.annotateLogs({ event_id: d.eventId, task_id: taskId, error })
      ),
      sql`
        INSERT INTO notification_dead_letters (event_id, task_id, body, error, attempts)
        VALUES (${d.eventId}, ${taskId}, ${d.body}, ${error}, ${d.attempt})
        ON CONFLICT (event_id) DO NOTHING`
    )

  const dispatch = (d: Delivery) =>
    Effect.gen(function*() {
      const decoded = decodeEvent(d.body)
      if (Either.isLeft(decoded)) {
        return yield* deadLetter(d, d.key, `unreadable: ${ParseResult.TreeFormatter.formatErrorSync(decoded.left)}`)
      }
      const e = decoded.right
      // DEGRADED_NOTIFY, MAINTENANCE: acked without a push. Nothing is lost: the event is in task_events, where a
      // client's snapshot (and its cursor replay, once streams open again) reads it
      if (!(yield* fence.allows("liveNotifications"))) return yield* Metric.increment(pushesPaused)
      const last = published.get(e.aggregate_id)
      if (last !== undefined && e.aggregate_version <= last) return
      const sent = yield* bus.publish(e.project_id, JSON.stringify(liveEventOf(e))).pipe(Effect.either)
      if (Either.isLeft(sent)) {
        if (d.attempt >= maxAttempts) return yield* deadLetter(d, e.aggregate_id, sent.left.message)
        return yield* Effect.fail(sent.left)
      }
      published.delete(e.aggregate_id)
      published.set(e.aggregate_id, e.aggregate_version)
      if (published.size > remembered) published.delete(published.keys().next().value!)
    }).pipe(Effect.withSpan("NotificationDispatcher.dispatch"))

  yield* queue.consume(group, dispatch)
}))
