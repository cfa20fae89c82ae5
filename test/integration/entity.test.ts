import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Fiber, TestServices } from "effect"
import { layerStores } from "../../src/runners/Runner.js"
import { isolatedEntityClient } from "../../src/testing/TaskTestClient.js"
import { layerTestDatabase, lockWaiters, noDatabase } from "../support/database.js"
import { scaled } from "../support/env.js"
import { admitTask, observation, uuid } from "../support/tasks.js"
import { eventually } from "../support/webhooks.js"

/** A client for one task, against a fresh entity instance built by GenerationTaskLive (the kit's). */
const clientFor = isolatedEntityClient

const rows = (taskId: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const [task] = yield* sql<{ status: string; version: number; last_seq: number }>`
      SELECT status, version, last_seq FROM generation_tasks WHERE id = ${taskId}`
    const events = yield* sql<{ task_version: number; cursor_seq: number; public_payload: unknown }>`
      SELECT task_version, cursor_seq, public_payload FROM task_events WHERE task_id = ${taskId} ORDER BY task_version`
    const outbox = yield* sql<{ aggregate_version: number; payload: any }>`
      SELECT aggregate_version, payload FROM outbox_events WHERE aggregate_id = ${taskId} ORDER BY aggregate_version`
    const [attempt] = yield* sql<{ submit_state: string; provider_task_id: string | null }>`
      SELECT a.submit_state, a.provider_task_id FROM task_attempts a
      JOIN generation_tasks t ON t.current_attempt_id = a.id WHERE t.id = ${taskId}`
    return { task: task!, events, outbox, attempt: attempt! }
  })

const setFence = (mode: string, epoch = 1) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql`UPDATE region_write_fence SET mode = ${mode}, write_epoch = ${epoch} WHERE resource_scope = 'global'`
  )

describe.skipIf(noDatabase)("GenerationTask entity on PostgreSQL", () => {
  it.layer(layerStores(layerTestDatabase()), { timeout: scaled(60_000) })((it) => {
    it.scoped("loads its state from PostgreSQL and answers Start / GetSnapshot", () =>
      Effect.gen(function*() {
        const { task, taskId } = yield* admitTask()
        const client = yield* clientFor(taskId)
        const started = yield* client.Start({ traceId: "t" })
        expect(started).toMatchObject({ id: taskId, status: "queued", version: 1 })
        expect(started.lastCursor.toString()).toBe(task.lastCursor.toString())
        const missing = yield* (yield* clientFor(uuid())).GetSnapshot().pipe(Effect.exit)
        expect(Exit.isFailure(missing) && JSON.stringify(missing.cause)).toContain("TaskNotFound")
      }))

    it.scoped("each change writes task, attempt, event and outbox row in one commit; duplicates write nothing", () =>
      Effect.gen(function*() {
        const { attemptId, taskId } = yield* admitTask()
        const client = yield* clientFor(taskId)
        const running = observation(attemptId, "running", { progress: 20 })
        expect((yield* client.Observe(running)).outcome).toBe("changed")
        expect((yield* client.Observe(running)).outcome).toBe("unchanged")
        const done = yield* client.Observe(observation(attemptId, "succeeded"))
        expect(done.task).toMatchObject({ status: "provider_succeeded", version: 3 })

        const r = yield* rows(taskId)
        expect(r.task).toMatchObject({ status: "provider_succeeded", version: 3 })
        expect(r.events.map((e) => e.task_version)).toEqual([1, 2, 3])
        expect(r.outbox.map((e) => e.aggregate_version)).toEqual([1, 2, 3])
        expect(r.attempt).toMatchObject({ submit_state: "SUCCEEDED", provider_task_id: `job-${attemptId}` })
        // the cursor the snapshot reports is the one of its last event, and the outbox carries it too
        expect(r.task.last_seq).toBe(r.events[2]!.cursor_seq)
        expect(r.outbox[2]!.payload.cursor).toBe(done.task.lastCursor.toString())
        // browser payloads never carry provider URLs or raw errors
        expect(JSON.stringify(r.events)).not.toContain("provider.example")
      }))

    it.scoped("on a lost version CAS it reloads and re-evaluates instead of overwriting", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const { attemptId, taskId } = yield* admitTask()
        const client = yield* clientFor(taskId)
        yield* client.Observe(observation(attemptId, "running", { progress: 10 }))
        // another writer (a runner that still held the shard) commits behind the cached state's back
        yield* sql`UPDATE generation_tasks SET version = version + 1, status = 'failed', stage = 'generating',
                   terminal_at = now() WHERE id = ${taskId}`
        const res = yield* client.Observe(observation(attemptId, "running", { progress: 50 }))
        expect(res).toMatchObject({ outcome: "ignored", reason: "terminal" })
        expect((yield* rows(taskId)).task).toMatchObject({ status: "failed", version: 3 })
      }))

    it.scoped("the write fence refuses writes in READ_ONLY mode and from an old epoch, and writes nothing", () =>
      Effect.gen(function*() {
        const { attemptId, taskId } = yield* admitTask()
        const client = yield* clientFor(taskId)
        yield* setFence("READ_ONLY")
        const readOnly = yield* client.Observe(observation(attemptId, "running", { progress: 10 })).pipe(Effect.flip)
        expect(readOnly._tag).toBe("WriteFenced")
        yield* setFence("NORMAL", 2)
        const oldEpoch = yield* client.Observe(observation(attemptId, "running", { progress: 10 })).pipe(Effect.flip)
        expect(oldEpoch._tag).toBe("WriteFenced")
        const r = yield* rows(taskId)
        expect(r.task.version).toBe(1)
        expect(r.events).toHaveLength(1)
        yield* setFence("NORMAL", 1)
        expect((yield* client.Observe(observation(attemptId, "running", { progress: 10 }))).outcome).toBe("changed")
      }))

    it.scoped("a fence change waits for writers in flight; a write racing it is fenced, never landing after it", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const { attemptId, taskId } = yield* admitTask()
        const client = yield* clientFor(taskId)
        // the operator's epoch bump, still uncommitted, holds the fence row
        const operator = yield* sql.reserve
        yield* operator.executeRaw("BEGIN", [])
        yield* operator.executeRaw("UPDATE region_write_fence SET write_epoch = 2 WHERE resource_scope = 'global'", [])
        const write = yield* client.Observe(observation(attemptId, "running", { progress: 10 })).pipe(
          Effect.flip,
          Effect.fork
        )
        // the writer waits for the fence decision: blocked on the fence row's lock (waited for in real time)
        yield* TestServices.provideLive(eventually(lockWaiters, (n) => n > 0))
        expect(write.unsafePoll()).toBeNull()
        yield* operator.executeRaw("COMMIT", [])
        expect((yield* Fiber.join(write))._tag).toBe("WriteFenced")
        expect((yield* rows(taskId)).events).toHaveLength(1)
        yield* setFence("NORMAL", 1)
      }))

    it.scoped("observations from an old attempt never change the task", () =>
      Effect.gen(function*() {
        const { taskId } = yield* admitTask()
        const client = yield* clientFor(taskId)
        const res = yield* client.Observe(observation(uuid() as never, "succeeded"))
        expect(res).toMatchObject({ outcome: "ignored", reason: "stale_attempt" })
        expect((yield* rows(taskId)).task.version).toBe(1)
      }))

    it.scoped("a contradictory terminal is recorded for reconciliation, once", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const { attemptId, taskId } = yield* admitTask()
        const client = yield* clientFor(taskId)
        yield* client.Observe(observation(attemptId, "failed"))
        const late = observation(attemptId, "succeeded")
        expect((yield* client.Observe(late)).outcome).toBe("conflict")
        expect((yield* client.Observe(late)).outcome).toBe("conflict")
        const recs = yield* sql<{ reason: string }>`SELECT reason FROM task_reconciliations WHERE task_id = ${taskId}`
        expect(recs).toEqual([{ reason: "succeeded after failed" }])
        expect((yield* rows(taskId)).task.status).toBe("failed")
      }))

    it.scoped("cancel moves a submitted task to cancel_requested; the provider's confirmation cancels it", () =>
      Effect.gen(function*() {
        const { attemptId, taskId } = yield* admitTask()
        const client = yield* clientFor(taskId)
        yield* client.Observe(observation(attemptId, "queued"))
        const c = yield* client.Cancel({ traceId: "t" })
        expect(c.task.status).toBe("cancel_requested")
        yield* client.Observe(observation(attemptId, "canceled"))
        expect((yield* client.GetSnapshot()).status).toBe("canceled")
      }))

    it.scoped("memory is only a cache: a fresh entity instance sees what the last one committed", () =>
      Effect.gen(function*() {
        const { attemptId, taskId } = yield* admitTask()
        yield* (yield* clientFor(taskId)).Observe(observation(attemptId, "running", { progress: 40 }))
        const fresh = yield* (yield* clientFor(taskId)).GetSnapshot()
        expect(fresh).toMatchObject({ status: "running", progress: 40, version: 2 })
      }))
  })
})
