import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Layer, Metric, Option } from "effect"
import { makeChange } from "../../src/domain/transition.js"
import { groupCommitBatchSize } from "../../src/observability/metrics.js"
import { AttemptSchedule } from "../../src/persistence/AttemptSchedule.js"
import { TaskStore } from "../../src/persistence/TaskStore.js"
import { layerStores } from "../../src/runners/Runner.js"
import type { TaskId } from "../../src/schema/ids.js"
import { AttemptSnapshot, trusted } from "../../src/schema/task.js"
import { layerTestDatabase, noDatabase } from "../support/database.js"
import { scaled } from "../support/env.js"
import { withSettings } from "../support/runner.js"
import { admitTask, uuid } from "../support/tasks.js"

describe.skipIf(noDatabase)("group commit", () => {
  // one commit worker: concurrent commits must share batches, so the batch path is what this file exercises
  it.layer(layerStores(layerTestDatabase()).pipe(Layer.provide(withSettings({ COMMIT_PARALLELISM: "1" }))), {
    timeout: scaled(60_000)
  })((it) => {
    it.effect("a change that violates a constraint fails alone; its batch-mates commit", () =>
      Effect.gen(function*() {
        const store = yield* TaskStore
        const sql = yield* SqlClient.SqlClient
        const projectId = uuid()
        const tasks = yield* Effect.forEach(Array.from({ length: 12 }), () => admitTask({ projectId }))
        const duplicateJob = `job-${uuid()}`
        const states = yield* Effect.forEach(tasks, ({ taskId }) => Effect.map(store.load(taskId), Option.getOrThrow))
        const exits = yield* Effect.forEach(states, (state, i) =>
          Effect.gen(function*() {
            // two tasks claim the same provider job: UNIQUE (provider, provider_task_id) lets only one win
            const attempt = new AttemptSnapshot({
              ...state.attempt!,
              submitState: "SUBMITTED",
              providerTaskId: i < 2 ? duplicateJob : `job-${state.task.id}`
            }, trusted)
            const change = makeChange(
              state.task,
              attempt,
              {
                status: "submitted",
                stage: "provider_queued",
                progress: null,
                errorCode: null
              },
              new Date(),
              { source: "poll", traceId: "t" }
            )
            return yield* store.commit(state.task, change)
          }).pipe(Effect.exit), { concurrency: "unbounded" })

        const failed = exits.filter(Exit.isFailure)
        expect(failed).toHaveLength(1)
        expect(exits.filter((e) => Exit.isSuccess(e) && e.value._tag === "Committed")).toHaveLength(11)
        const [{ n }] = yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM task_events WHERE project_id = ${projectId} AND task_version = 2`
        expect(n).toBe(11)
        // the stream stays gap-free: the failed change took no cursor
        const seqs = yield* sql<{ cursor_seq: number }>`
          SELECT cursor_seq FROM task_events WHERE project_id = ${projectId} ORDER BY cursor_seq`
        expect(seqs.map((r) => r.cursor_seq)).toEqual(Array.from({ length: seqs.length }, (_, i) => i + 1))
      }))

    it.effect("loads asked for together are read together, each answered as alone", () =>
      Effect.gen(function*() {
        const store = yield* TaskStore
        const tasks = yield* Effect.forEach(Array.from({ length: 6 }), () => admitTask())
        const asked = [
          ...tasks.map((t) => t.taskId as string),
          tasks[0]!.taskId.toUpperCase(), // PostgreSQL's uuid `=` ignores case; so does the grouped read
          uuid(), // no such task
          "not-a-uuid" // no such task either, and it must not fail its batch-mates' read
        ]
        const loaded = yield* Effect.forEach(asked, (id) => store.load(id as TaskId), { concurrency: "unbounded" })
        tasks.forEach((t, i) => {
          const state = Option.getOrThrow(loaded[i]!)
          expect(state.task.id).toBe(t.taskId)
          expect(state.attempt?.id).toBe(t.attemptId)
        })
        expect(Option.getOrThrow(loaded[6]!).task.id).toBe(tasks[0]!.taskId)
        expect(Option.isNone(loaded[7]!)).toBe(true)
        expect(Option.isNone(loaded[8]!)).toBe(true)
      }))

    it.effect("poll claims and finishes asked together share statements, and each lease goes to one asker", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const schedule = yield* AttemptSchedule
        const statements = (writer: string) =>
          Effect.map(Metric.value(Metric.tagged(groupCommitBatchSize, "writer", writer)), (h) => h.count)
        const tasks = yield* Effect.forEach(Array.from({ length: 8 }), () => admitTask())
        const ids = tasks.map((t) => t.attemptId)
        // 0–3 due, 4–5 due but leased by another poller, 6–7 not due yet
        yield* sql`UPDATE task_attempts SET next_poll_at = now() - interval '1 second' WHERE id IN ${sql.in(ids)}`
        yield* sql`
          UPDATE task_attempts SET poll_lease_token = gen_random_uuid(), poll_lease_until = now() + interval '1 minute'
          WHERE id IN ${sql.in(ids.slice(4, 6))}`
        yield* sql`UPDATE task_attempts SET next_poll_at = now() + interval '1 minute' WHERE id IN ${
          sql.in(ids.slice(6))
        }`
        const claimsBefore = yield* statements("poll_claims")
        // attempt 0 asked for twice in the same group: one lease
        const asked = [...ids, ids[0]!]
        const leases = yield* Effect.forEach(asked, (id) => schedule.claim(id, 30_000), { concurrency: "unbounded" })
        expect(leases.map(Option.isSome)).toEqual([true, true, true, true, false, false, false, false, false])
        // fewer statements than claims: they went in groups
        const claimStatements = (yield* statements("poll_claims")) - claimsBefore
        expect(claimStatements).toBeGreaterThan(0)
        expect(claimStatements).toBeLessThan(asked.length)

        const finishesBefore = yield* statements("poll_finishes")
        yield* Effect.forEach(
          [0, 1, 2, 3],
          (i) =>
            schedule.finish(ids[i]!, i === 3 ? { token: uuid(), latenessMs: 0 } : Option.getOrThrow(leases[i]!), {
              delayMs: 60_000 * (i + 1),
              failed: i === 1,
              error: i === 1 ? "rate_limited" : null
            }),
          { concurrency: "unbounded" }
        )
        const finishStatements = (yield* statements("poll_finishes")) - finishesBefore
        expect(finishStatements).toBeGreaterThan(0)
        expect(finishStatements).toBeLessThan(4)
        const rows = yield* sql<
          { id: string; leased: boolean; in_s: number; poll_failures: number; last_poll_error: string | null }
        >`
          SELECT id, poll_lease_token IS NOT NULL AS leased,
            extract(epoch FROM next_poll_at - now())::float8 AS in_s, poll_failures, last_poll_error
          FROM task_attempts WHERE id IN ${sql.in(ids.slice(0, 4))}`
        const byId = new Map(rows.map((r) => [String(r.id), r]))
        const [first, second, third, wrongToken] = ids.slice(0, 4).map((id) => byId.get(id)!)
        expect([first, second, third]).toMatchObject([
          { leased: false, poll_failures: 0, last_poll_error: null },
          { leased: false, poll_failures: 1, last_poll_error: "rate_limited" },
          { leased: false, poll_failures: 0, last_poll_error: null }
        ])
        // each its own delay (seconds from the finish's statement; the read comes a moment after it)
        expect([first, second, third].map((r) => Math.round(r!.in_s / 60))).toEqual([1, 2, 3])
        // a finish with another lease's token changes nothing: the lease stays, the poll stays due
        expect(wrongToken).toMatchObject({ leased: true, poll_failures: 0, last_poll_error: null })
        expect(wrongToken!.in_s).toBeLessThanOrEqual(0)
      }).pipe(Effect.provide(AttemptSchedule.Default)))

    it.effect("a task's load reads its attempt's poll schedule with it, as AttemptSchedule's own read does", () =>
      Effect.gen(function*() {
        const store = yield* TaskStore
        const sql = yield* SqlClient.SqlClient
        const [polled, fresh] = yield* Effect.forEach([1, 2], () => admitTask())
        yield* sql`
          UPDATE task_attempts SET next_poll_at = '2026-01-02T03:04:05.678Z', poll_failures = 3
          WHERE id = ${polled!.attemptId}`
        const [a, b] = yield* Effect.forEach([polled!, fresh!], (t) => store.load(t.taskId), { concurrency: 2 })
        expect(Option.getOrThrow(a!).schedule).toEqual({
          nextPollAt: new Date("2026-01-02T03:04:05.678Z"),
          pollFailures: 3,
          pollLeaseUntil: null,
          cancelSentAt: null
        })
        const expected = Option.getOrThrow(
          yield* Effect.provide(
            Effect.flatMap(AttemptSchedule, (s) => s.get(polled!.attemptId)),
            AttemptSchedule.Default
          )
        )
        expect(Option.getOrThrow(a!).schedule).toEqual(expected)
        // an attempt not scheduled yet: the poll schedules its first one (scheduleMemoOf gives no memo)
        expect(Option.getOrThrow(b!).schedule?.nextPollAt).toBeNull()
      }))
  })
})
