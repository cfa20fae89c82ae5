import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Fiber, Option, Ref } from "effect"
import { makeChange } from "../../src/domain/transition.js"
import { TaskStore } from "../../src/persistence/TaskStore.js"
import { layerStores } from "../../src/runners/Runner.js"
import type { TaskId } from "../../src/schema/ids.js"
import { layerTestDatabase, noDatabase } from "../support/database.js"
import { scaled } from "../support/env.js"
import { admitTask, uuid } from "../support/tasks.js"

const WRITERS = 24
const CHANGES_PER_TASK = 15

/** One writer: a task of the shared project, changed CHANGES_PER_TASK times, each its own commit. */
const writer = (taskId: TaskId) =>
  Effect.gen(function*() {
    const store = yield* TaskStore
    for (let i = 1; i <= CHANGES_PER_TASK; i++) {
      const state = Option.getOrThrow(yield* store.load(taskId))
      const change = makeChange(
        state.task,
        state.attempt,
        { status: "running", stage: "generating", progress: i, errorCode: null },
        new Date(),
        { source: "poll", traceId: "t" }
      )
      const res = yield* store.commit(state.task, change)
      expect(res._tag).toBe("Committed")
    }
  })

describe.skipIf(noDatabase)("gap-free, commit-ordered project cursor", () => {
  layer(layerStores(layerTestDatabase(WRITERS + 4)), { timeout: scaled(120_000), excludeTestServices: true })((it) => {
    it.effect("a reader tailing cursor > x under many concurrent writers sees every event, in cursor order", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const projectId = uuid()
        const tasks = yield* Effect.forEach(
          Array.from({ length: WRITERS }),
          () => Effect.map(admitTask({ projectId }), (t) => t.taskId),
          { concurrency: 4 }
        )
        const [{ last_seq: startSeq }] = yield* sql<{ last_seq: number }>`
          SELECT last_seq FROM projects WHERE project_id = ${projectId}`
        const seen = yield* Ref.make<Array<number>>([])
        const done = yield* Ref.make(false)

        // The reader never waits for writers to finish: it follows the stream like a gateway does.
        const reader = yield* Effect.gen(function*() {
          let cursor = startSeq
          while (true) {
            const finished = yield* Ref.get(done)
            const page = yield* sql<{ cursor_seq: number }>`
              SELECT cursor_seq FROM task_events WHERE project_id = ${projectId} AND cursor_seq > ${cursor}
              ORDER BY cursor_seq LIMIT 50`
            for (const row of page) {
              yield* Ref.update(seen, (xs) => [...xs, row.cursor_seq])
              cursor = row.cursor_seq
            }
            if (finished && page.length === 0) return
          }
        }).pipe(Effect.fork)

        yield* Effect.forEach(tasks, writer, { concurrency: WRITERS, discard: true })
        yield* Ref.set(done, true)
        yield* Fiber.join(reader)

        const total = WRITERS * CHANGES_PER_TASK
        const all = yield* sql<{ cursor_seq: number }>`
          SELECT cursor_seq FROM task_events WHERE project_id = ${projectId} AND cursor_seq > ${startSeq}
          ORDER BY cursor_seq`
        expect(all).toHaveLength(total)
        // exactly the committed events, each once, in order, with no hole in the sequence
        const observed = yield* Ref.get(seen)
        expect(observed).toEqual(Array.from({ length: total }, (_, i) => startSeq + i + 1))
      }))

    it.effect("each task's events carry consecutive versions and the project's cursor grows with them", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const projectId = uuid()
        const { taskId } = yield* admitTask({ projectId })
        yield* writer(taskId)
        const events = yield* sql<{ task_version: number; cursor_seq: number }>`
          SELECT task_version, cursor_seq FROM task_events WHERE task_id = ${taskId} ORDER BY cursor_seq`
        expect(events.map((e) => e.task_version)).toEqual(Array.from({ length: CHANGES_PER_TASK + 1 }, (_, i) => i + 1))
        expect(events.map((e) => e.cursor_seq)).toEqual(Array.from({ length: CHANGES_PER_TASK + 1 }, (_, i) => i + 1))
      }))
  })
})
