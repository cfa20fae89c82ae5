import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Cause, Duration, Effect, Exit, Layer } from "effect"
import * as Bus from "../../src/bus/NotificationBus.js"
import { listDeadLetters, replayDeadLetters } from "../../src/propagation/DeadLetters.js"
import { layerPropagationWith } from "../../src/propagation/Propagation.js"
import { EventQueue } from "../../src/queue/EventQueue.js"
import { layerMemory as queueMemory } from "../../src/queue/MemoryQueue.js"
import { AdmissionsThrottled } from "../../src/schema/errors.js"
import { layerTestDatabase, noDatabase, wakeLoopListening } from "../support/database.js"
import { scaled } from "../support/env.js"
import { listen, taskWithHistory, until, versionsByTask } from "../support/propagation.js"
import { layerTestRunner, quietLogs, withSettings } from "../support/runner.js"
import { admitTask, uuid } from "../support/tasks.js"
import { eventually } from "../support/webhooks.js"

// a low watermark, counted afresh on every admission, so the backpressure test can reach it and see it at once
const settings = {
  OUTBOX_BACKLOG_WATERMARK: "10",
  OUTBOX_BACKLOG_CHECK_INTERVAL: "0 millis",
  OUTBOX_SWEEP_INTERVAL: "10 minutes"
}

// one queue and one bus, shared by the runner and the test (layers are memoized by reference)
const bus = Bus.layerMemory
const TestLayer = Layer.mergeAll(
  layerTestRunner(layerTestDatabase(), { propagation: layerPropagationWith(queueMemory, bus) }),
  bus,
  queueMemory
).pipe(Layer.provide(quietLogs), Layer.provide(withSettings(settings)))

describe.skipIf(noDatabase)("event propagation on the in-process queue and bus (npm start on a bare machine)", () => {
  layer(TestLayer, { timeout: scaled(60_000), excludeTestServices: true })((it) => {
    it.effect("every committed event reaches the project's subscribers in order per task, woken by NOTIFY", () =>
      Effect.gen(function*() {
        const projectId = uuid()
        const seen = yield* listen(yield* Bus.NotificationBus, projectId)
        // the relay singleton starts once the runner holds its shard, and LISTENs from then on
        yield* eventually(wakeLoopListening("outbox relay"), (yes) => yes, Duration.seconds(30))
        const started = Date.now()
        const ids = yield* Effect.forEach(Array.from({ length: 5 }), () => taskWithHistory(projectId), {
          concurrency: 5
        })
        // the sweep is 10 minutes away: only the outbox trigger's NOTIFY can have woken the relay
        yield* until("20 events", () => seen.seen.length >= 20, Duration.seconds(10))
        expect(Date.now() - started).toBeLessThan(scaled(10_000))
        for (const id of ids) expect(versionsByTask(seen.seen).get(id)).toEqual([1, 2, 3, 4])
        // nothing for other projects, nothing published twice, and every row marked
        expect(new Set(seen.seen.map((e) => e.cursor)).size).toBe(seen.seen.length)
        const sql = yield* SqlClient.SqlClient
        yield* eventually(
          sql<{ n: number }>`SELECT count(*)::int AS n FROM outbox_events WHERE published_at IS NULL`,
          ([r]) => r!.n === 0
        )
      }).pipe(Effect.scoped))

    it.effect("a notification that cannot be delivered becomes a dead letter, listed and replayed", () =>
      Effect.gen(function*() {
        const queue = yield* EventQueue
        const projectId = uuid()
        const seen = yield* listen(yield* Bus.NotificationBus, projectId)
        // an unreadable message: straight to the dead letters, and the queue moves on
        yield* queue.publish([{ key: "t", group: "t", eventId: "bad-1", body: "{not json" }])
        const sql = yield* SqlClient.SqlClient
        const taskId = yield* taskWithHistory(projectId)
        yield* until("the task's events", () => versionsByTask(seen.seen).get(taskId)?.length === 4)
        const letters = yield* listDeadLetters
        expect(letters.map((l) => [l.event_id, l.error.startsWith("unreadable")])).toEqual([["bad-1", true]])
        // a readable event dead-lettered earlier (as after a long Redis outage) is published again by a replay
        const [row] = yield* sql<{ payload: unknown }>`
          SELECT payload FROM outbox_events WHERE aggregate_id = ${taskId} ORDER BY aggregate_version DESC LIMIT 1`
        yield* sql`INSERT INTO notification_dead_letters (event_id, task_id, body, error, attempts)
                   VALUES ('late-1', ${taskId}, ${JSON.stringify(row!.payload)}, 'bus unavailable', 10)`
        const before = seen.seen.length
        const replayed = yield* replayDeadLetters((yield* listDeadLetters).find((l) => l.event_id === "late-1")!.id)
        expect(replayed).toBe(1)
        yield* until("the replayed event", () => seen.seen.length === before + 1)
        expect(seen.seen.at(-1)!.payload).toMatchObject({ task_id: taskId, task_version: 4 })
        expect((yield* listDeadLetters).map((l) => l.event_id)).toEqual(["bad-1"])
      }).pipe(Effect.scoped))

    it.effect("past the outbox backlog watermark, new tasks are refused until the backlog drains", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        // as if the queue were down: 20 rows nobody publishes (the relay has published everything before)
        yield* sql`UPDATE outbox_events SET published_at = NULL
                   WHERE id IN (SELECT id FROM outbox_events ORDER BY id LIMIT 20)`
        const refused = yield* Effect.exit(admitTask())
        expect(Exit.isFailure(refused) && Cause.squash(refused.cause)).toBeInstanceOf(AdmissionsThrottled)
        yield* sql`SELECT pg_notify('outbox_events', 'test')`
        yield* eventually(
          sql<{ n: number }>`SELECT count(*)::int AS n FROM outbox_events WHERE published_at IS NULL`,
          ([r]) => r!.n === 0
        )
        yield* admitTask()
      }))
  })
})
