import { FetchHttpClient } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Context, Effect, Layer, Redacted } from "effect"
import { transition } from "../../src/domain/transition.js"
import * as Database from "../../src/persistence/Database.js"
import { TaskStore } from "../../src/persistence/TaskStore.js"
import { WriteFence } from "../../src/persistence/WriteFence.js"
import { layerStores } from "../../src/runners/Runner.js"
import type { TaskId } from "../../src/schema/ids.js"
import { taskTestClient } from "../../src/testing/TaskTestClient.js"
import { adminClient } from "../support/admin.js"
import { databaseUrl, layerTestDatabase, noDatabase } from "../support/database.js"
import { scaled } from "../support/env.js"
import { freePort, layerTestRunner, quietLogs, withSettings } from "../support/runner.js"
import { layerRunnerHttp } from "../support/simulator.js"
import { admitTask, observation } from "../support/tasks.js"
import { eventually } from "../support/webhooks.js"

const httpPort = await Effect.runPromise(freePort)
const platform = `http://127.0.0.1:${httpPort}`

// the runner under test follows the fence row (no WRITE_EPOCH): it is the runner "on the new epoch"
const TestLayer = layerRunnerHttp(httpPort).pipe(
  Layer.provideMerge(layerTestRunner(layerTestDatabase())),
  Layer.provide(FetchHttpClient.layer),
  Layer.provide(quietLogs),
  Layer.provide(withSettings({ FENCE_REFRESH_INTERVAL: "1 second" }))
)

/**
 * A second writer on the same database, as another runner would be: its own pool and stores, started on epoch
 * `epoch` and pinned to it (WRITE_EPOCH), so it never follows a bump.
 */
const pinnedWriter = (epoch: number) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const [{ name }] = (yield* sql<{ name: string }>`SELECT current_database() AS name`) as [{ name: string }]
    const url = new URL(databaseUrl!)
    url.pathname = `/${name}`
    const stores = layerStores(
      Database.layerPostgres({ url: Redacted.make(url.toString()), maxConnections: 2, applicationName: "pinned" })
    ).pipe(Layer.provide(quietLogs), Layer.provide(withSettings({ WRITE_EPOCH: String(epoch) })))
    const context = yield* Layer.build(stores)
    return Context.get(context, TaskStore)
  })

/** A write of `taskId` by `store`, as its entity would make it (the same transition, the same commit). */
const progressBy = (store: TaskStore, taskId: TaskId, progress: number) =>
  Effect.gen(function*() {
    const state = (yield* store.load(taskId)).pipe((o) => (o._tag === "Some" ? o.value : undefined))!
    const outcome = transition(
      state.task,
      state.attempt,
      observation(state.attempt!.id, "running", { progress }),
      new Date()
    )
    if (outcome._tag !== "Changed") return yield* Effect.die(`no change: ${outcome._tag}`)
    return yield* store.commit(state.task, outcome.change).pipe(Effect.either)
  })

describe.skipIf(noDatabase)("write epoch bumps (seed 19.4.4) through the admin API", () => {
  layer(TestLayer, { timeout: scaled(60_000), excludeTestServices: true })((it) => {
    it.scoped("after a bump the old-epoch writer writes nothing under it; the following runner carries on", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const fence = yield* WriteFence
        const admin = yield* adminClient(platform)
        const start = yield* admin.operations.getMode()
        const pinned = yield* pinnedWriter(start.write_epoch)

        const { attemptId, taskId } = yield* admitTask()
        const task = yield* taskTestClient(taskId)
        yield* task.observe(observation(attemptId, "running", { progress: 10 }))
        // before the bump both write
        expect((yield* progressBy(pinned, taskId, 20))._tag).toBe("Right")

        const bumped = yield* admin.operations.bumpEpoch({
          payload: { region: "local", reason: "test: failover drill" }
        })
        expect(bumped.write_epoch).toBe(start.write_epoch + 1)
        const bumpedAt = new Date()

        // the old-epoch writer is refused, in the database, whatever it believes
        const refused = yield* progressBy(pinned, taskId, 30)
        expect(refused._tag === "Left" && refused.left._tag).toBe("WriteFenced")

        // the following runner adopts the new epoch within seconds, without a restart, and carries on
        yield* eventually(Effect.sync(() => fence.current().epoch), (e) => e === bumped.write_epoch)
        const after = yield* task.observe(observation(attemptId, "running", { progress: 40 }))
        expect(after.outcome).toBe("changed")
        const [row] = yield* sql<{ write_epoch: number; progress: number }>`
          SELECT write_epoch, progress FROM generation_tasks WHERE id = ${taskId}`
        expect(row).toEqual({ write_epoch: bumped.write_epoch, progress: 40 })
        // nothing was written under the old epoch after the bump
        const [old] = yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM outbox_events WHERE write_epoch < ${bumped.write_epoch}
            AND created_at >= ${bumpedAt}`
        expect(old!.n).toBe(0)

        const { changes } = yield* admin.operations.audit()
        expect(changes[0]).toMatchObject({
          operator: "ops-test",
          what: "epoch local",
          from: `local@${start.write_epoch}`,
          to: `local@${bumped.write_epoch}`,
          reason: "test: failover drill"
        })
      }))

    it.effect("another active region stops this runner's writes; made active again, it adopts the new epoch", () =>
      Effect.gen(function*() {
        const fence = yield* WriteFence
        const admin = yield* adminClient(platform)
        const { attemptId, taskId } = yield* admitTask()
        const task = yield* taskTestClient(taskId)

        const away = yield* admin.operations.bumpEpoch({ payload: { region: "eu-west", reason: "test: away" } })
        expect(away.active_region).toBe("eu-west")
        const fenced = yield* task.observe(observation(attemptId, "running", { progress: 10 })).pipe(Effect.either)
        expect(fenced._tag === "Left" && fenced.left._tag).toBe("WriteFenced")
        // this runner keeps its old epoch: it does not adopt another region's
        expect(fence.current().epoch).toBeLessThan(away.write_epoch)

        const back = yield* admin.operations.bumpEpoch({ payload: { region: "local", reason: "test: back" } })
        yield* eventually(Effect.sync(() => fence.current().epoch), (e) => e === back.write_epoch)
        const res = yield* task.observe(observation(attemptId, "running", { progress: 20 }))
        expect(res.outcome).toBe("changed")
      }))
  })
})
