import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Deferred, Duration, Effect, Layer } from "effect"
import * as Bus from "../../src/bus/NotificationBus.js"
import { layerPropagationWith } from "../../src/propagation/Propagation.js"
import { EventQueue, type OutgoingMessage, QueueUnavailable } from "../../src/queue/EventQueue.js"
import { layerMemory as queueMemory } from "../../src/queue/MemoryQueue.js"
import { layerTestDatabase, noDatabase } from "../support/database.js"
import { scaled } from "../support/env.js"
import { listen, taskWithHistory, until, versionsByTask } from "../support/propagation.js"
import { layerTestRunner, quietLogs, withSettings } from "../support/runner.js"
import { uuid } from "../support/tasks.js"
import { eventually } from "../support/webhooks.js"

/**
 * The outbox relay against a queue that refuses sends when told to: batches of 5 rows, so one task's four versions
 * span batches, and a refused batch is retried within 200 ms.
 */
const settings = {
  OUTBOX_BATCH_SIZE: "5",
  OUTBOX_SWEEP_INTERVAL: "200 millis",
  OUTBOX_MAX_BACKOFF: "200 millis"
}

/** Every message the queue acknowledged, in order; `refuse` decides, per publish (counted from 1), to refuse it. */
const acknowledged: Array<OutgoingMessage> = []
let refuse: (publish: number) => boolean = () => false
let publishes = 0
let refused = 0
/** A publish holding a message of this project completes `holding`, then waits for `gate`. */
let heldProject: string | undefined
let gate = Effect.runSync(Deferred.make<void>())
let holding = Effect.runSync(Deferred.make<void>())

const flakyQueue = Layer.effect(
  EventQueue,
  Effect.map(EventQueue, (inner) =>
    EventQueue.of({
      ...inner,
      publish: (messages) =>
        Effect.suspend(() => {
          if (refuse(++publishes)) {
            refused++
            return Effect.fail(new QueueUnavailable({ message: "refused by the test" }))
          }
          const held = heldProject !== undefined && messages.some((m) => m.body.includes(heldProject!))
          return (held ? Effect.zipRight(Deferred.succeed(holding, undefined), Deferred.await(gate)) : Effect.void)
            .pipe(
              Effect.zipRight(inner.publish(messages)),
              Effect.tap(() => acknowledged.push(...messages))
            )
        })
    }))
).pipe(Layer.provide(queueMemory))

const bus = Bus.layerMemory
const TestLayer = Layer.mergeAll(
  layerTestRunner(layerTestDatabase(), { propagation: layerPropagationWith(flakyQueue, bus) }),
  bus
).pipe(Layer.provide(quietLogs), Layer.provide(withSettings(settings)))

const unpublished = (taskIds: ReadonlyArray<string>) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ n: number }>`
      SELECT count(*)::int AS n FROM outbox_events
      WHERE published_at IS NULL AND aggregate_id IN ${sql.in(taskIds)}`).pipe(Effect.map(([r]) => r!.n))

/** The versions of each task in the order the queue first acknowledged them. */
const acknowledgedVersions = (taskIds: ReadonlyArray<string>) =>
  new Map(taskIds.map((id) => {
    const versions = acknowledged.filter((m) => m.group === id).map((m) =>
      (JSON.parse(m.body) as { aggregate_version: number }).aggregate_version
    )
    return [id, [...new Set(versions)]]
  }))

describe.skipIf(noDatabase)("outbox relay: batches side by side, a task in one at a time", () => {
  layer(TestLayer, { timeout: scaled(60_000), excludeTestServices: true })((it) => {
    it.effect("a batch the queue refuses is not marked and is sent again until acknowledged: nothing is lost", () =>
      Effect.gen(function*() {
        const projectId = uuid()
        const seen = yield* listen(yield* Bus.NotificationBus, projectId)
        refuse = () => true
        const before = refused
        const ids = yield* Effect.forEach(Array.from({ length: 3 }), () => taskWithHistory(projectId), {
          concurrency: 3
        })
        // refused three times since the twelve rows were committed: none of them is marked
        yield* until("refused sends", () => refused >= before + 3, Duration.seconds(20))
        const afterRefusals = refused
        yield* until("another refusal", () => refused > afterRefusals, Duration.seconds(20))
        expect(yield* unpublished(ids)).toBe(12)
        expect(acknowledged.filter((m) => (ids as ReadonlyArray<string>).includes(m.group))).toEqual([])

        refuse = () => false
        yield* until("12 events", () => seen.seen.length >= 12, Duration.seconds(20))
        for (const id of ids) expect(versionsByTask(seen.seen).get(id)).toEqual([1, 2, 3, 4])
        yield* eventually(unpublished(ids), (n) => n === 0)
        const sql = yield* SqlClient.SqlClient
        // every row marked published was acknowledged by the queue first
        const marked = yield* sql<{ event_id: string }>`
          SELECT event_id::text FROM outbox_events WHERE published_at IS NOT NULL AND aggregate_id IN ${sql.in(ids)}`
        const acked = new Set(acknowledged.map((m) => m.eventId))
        expect(marked.length).toBe(12)
        for (const r of marked) expect(acked.has(r.event_id)).toBe(true)
      }).pipe(Effect.scoped))

    it.effect("one task's order holds across batches while every third send is refused", () =>
      Effect.gen(function*() {
        const projectId = uuid()
        const seen = yield* listen(yield* Bus.NotificationBus, projectId)
        const before = refused
        refuse = (n) => n % 3 === 0
        const ids = yield* Effect.forEach(Array.from({ length: 10 }), () => taskWithHistory(projectId), {
          concurrency: 10
        })
        yield* until("40 events", () => seen.seen.length >= 40, Duration.seconds(30))
        refuse = () => false
        expect(refused).toBeGreaterThan(before)
        // the queue got each task's versions in order, and the subscribers saw each exactly once, in order
        for (const [id, versions] of acknowledgedVersions(ids)) {
          expect(versions, id).toEqual([1, 2, 3, 4])
          expect(versionsByTask(seen.seen).get(id), id).toEqual([1, 2, 3, 4])
        }
        expect(seen.seen.length).toBe(40)
      }).pipe(Effect.scoped))

    it.effect("a batch whose send hangs holds its own tasks only: others are sent meanwhile, its task's later rows wait", () =>
      Effect.gen(function*() {
        const [slow, fast] = [uuid(), uuid()]
        const seenSlow = yield* listen(yield* Bus.NotificationBus, slow)
        const seenFast = yield* listen(yield* Bus.NotificationBus, fast)
        gate = yield* Deferred.make<void>()
        holding = yield* Deferred.make<void>()
        heldProject = slow
        const a = yield* taskWithHistory(slow)
        // the hanging batch holds a's first row(s) (and is out before b's are written); a's later rows wait for it;
        // b's go past it
        yield* Deferred.await(holding)
        const b = yield* taskWithHistory(fast)
        yield* until("b's 4 events while a's batch hangs", () => seenFast.seen.length >= 4)
        expect(versionsByTask(seenFast.seen).get(b)).toEqual([1, 2, 3, 4])
        expect(seenSlow.seen).toEqual([])
        expect(acknowledged.filter((m) => m.group === a)).toEqual([])
        expect(yield* unpublished([a])).toBe(4)

        yield* Deferred.succeed(gate, undefined)
        yield* until("a's 4 events", () => seenSlow.seen.length >= 4)
        heldProject = undefined
        expect(acknowledgedVersions([a]).get(a)).toEqual([1, 2, 3, 4])
        expect(versionsByTask(seenSlow.seen).get(a)).toEqual([1, 2, 3, 4])
        yield* eventually(unpublished([a, b]), (n) => n === 0)
      }).pipe(Effect.scoped))
  })
})
