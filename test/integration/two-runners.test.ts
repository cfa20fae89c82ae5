import { EntityId, Sharding } from "@effect/cluster"
import { describe, expect, it } from "@effect/vitest"
import { Context, Duration, Effect, Exit, Schedule, Scope } from "effect"
import { TaskClient } from "../../src/entities/TaskClient.js"
import { layerPropagationMemory } from "../../src/propagation/Propagation.js"
import { makeTestDatabaseUrl, noDatabase } from "../support/database.js"
import { scaled, scaledDuration } from "../support/env.js"
import { startScopedRunner } from "../support/runner.js"
import { admitTask, observation } from "../support/tasks.js"

const TASKS = 40

const startRunner = (url: string) => startScopedRunner(url, layerPropagationMemory)

type Runner = Effect.Effect.Success<ReturnType<typeof startRunner>>

const ownsShardOf = (runner: Runner, taskId: string) => {
  const sharding = Context.get(runner.context, Sharding.Sharding)
  return sharding.hasShardId(sharding.getShardId(EntityId.make(taskId), "default"))
}

describe.skipIf(noDatabase)("two runners on one PostgreSQL", () => {
  it.live(
    "tasks spread over both; when one stops, its tasks answer on the other with their state intact",
    () =>
      Effect.gen(function*() {
        const { url } = yield* makeTestDatabaseUrl
        const a = yield* startRunner(url)
        const b = yield* startRunner(url)
        const onA = <X, E, R>(effect: Effect.Effect<X, E, R>) => Effect.provide(effect, a.context as Context.Context<R>)

        // wait until the shards are split between the two runners
        const created = yield* onA(Effect.forEach(Array.from({ length: TASKS }), () => admitTask(), { concurrency: 4 }))
        yield* Effect.suspend(() => {
          const onB = created.filter((t) => ownsShardOf(b, t.taskId)).length
          const onBoth = created.filter((t) => ownsShardOf(a, t.taskId) && ownsShardOf(b, t.taskId)).length
          return onB > 0 && onB < TASKS && onBoth === 0 ? Effect.void : Effect.fail("not balanced yet")
        }).pipe(
          Effect.retry(Schedule.spaced(Duration.millis(250)).pipe(Schedule.upTo(scaledDuration(Duration.seconds(30)))))
        )

        // every task gets a change through the cluster, wherever its entity lives
        yield* onA(Effect.forEach(created, (t, i) =>
          Effect.flatMap(TaskClient, (client) =>
            client.send(t.taskId, (c) =>
              c.Observe(observation(t.attemptId, "running", { progress: 10 + i })))), {
          concurrency: 8
        }))
        const movedTasks = created.filter((t) =>
          ownsShardOf(b, t.taskId)
        )
        expect(movedTasks.length).toBeGreaterThan(0)

        // runner B stops gracefully (releases its shards); A takes them over
        yield* Scope.close(b.scope, Exit.void)
        const started = Date.now()
        const snapshots = yield* onA(Effect.forEach(movedTasks, (t) =>
          Effect.flatMap(TaskClient, (client) =>
            client.send(t.taskId, (c) => c.GetSnapshot())), { concurrency: 8 }))
        const handoffMs = Date.now() - started
        snapshots.forEach((s, i) => {
          const index = created.indexOf(movedTasks[i]!)
          expect(s).toMatchObject({ status: "running", version: 2, progress: 10 + index })
        })
        // A's view of its own shard set catches up within its assignment refresh
        yield* Effect.suspend(() =>
          movedTasks.every((t) =>
              ownsShardOf(a, t.taskId)
            )
            ? Effect.void
            : Effect.fail("A does not own them yet")
        ).pipe(
          Effect.retry(Schedule.spaced(Duration.millis(200)).pipe(Schedule.upTo(scaledDuration(Duration.seconds(15)))))
        )
        // and they keep changing on their new owner
        const next = yield* onA(
          Effect.flatMap(TaskClient, (client) =>
            client.send(movedTasks[0]!.taskId, (c) =>
              c.Observe(observation(movedTasks[0]!.attemptId, "succeeded"))))
        )
        expect(next.task).toMatchObject({ status: "provider_succeeded", version: 3 })
        yield* Effect.logWarning(`handoff after graceful stop: ${movedTasks.length} tasks answered in ${handoffMs} ms`)
        yield* Scope.close(a.scope, Exit.void)
      }).pipe(Effect.scoped),
    { timeout: scaled(120_000) }
  )

  it.live(
    "the admission path is shared: a task created through one runner is visible through the other",
    () =>
      Effect.gen(function*() {
        const { url } = yield* makeTestDatabaseUrl
        const a = yield* startRunner(url)
        const b = yield* startRunner(url)
        const { taskId } = yield* Effect.provide(admitTask(), a.context)
        const found = yield* Effect.provide(
          Effect.flatMap(TaskClient, (client) => client.send(taskId, (c) => c.GetSnapshot())),
          b.context
        )
        expect(found.id).toBe(taskId)
        yield* Scope.close(b.scope, Exit.void)
        yield* Scope.close(a.scope, Exit.void)
      }).pipe(Effect.scoped),
    { timeout: scaled(120_000) }
  )
})
