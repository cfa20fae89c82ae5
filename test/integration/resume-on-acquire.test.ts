import { ShardId, Sharding, ShardingConfig } from "@effect/cluster"
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { makeParkedTasks } from "../../src/entities/ParkedTasks.js"
import { ResumeOnAcquireLive } from "../../src/entities/ResumeOnAcquire.js"
import { makeShardsLeft } from "../../src/entities/shardsLeft.js"
import { TaskClient } from "../../src/entities/TaskClient.js"
import { TaskLifecycle } from "../../src/entities/TaskLifecycle.js"
import { MigrationsLive } from "../../src/persistence/Database.js"
import { until } from "../support/admin.js"
import { layerTestDatabase, noDatabase } from "../support/database.js"
import { scaled } from "../support/env.js"

/** `n` queued tasks (no provider job yet: a resume sends them Start). */
const insertQueued = (n: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ id: string }>`
      WITH p AS (
        INSERT INTO projects (project_id, tenant_id, stream_epoch)
        VALUES (gen_random_uuid(), gen_random_uuid(), 1) RETURNING project_id, tenant_id
      ), j AS (SELECT gen_random_uuid() AS task, gen_random_uuid() AS attempt FROM generate_series(1, ${n})),
      t AS (
        INSERT INTO generation_tasks (id, tenant_id, project_id, user_id, idempotency_key, request_hash, request,
          status, stage, version, last_seq, current_attempt_id, home_region, write_epoch)
        SELECT task, p.tenant_id, p.project_id, gen_random_uuid(), task::text, 'h', '{}', 'queued', 'queued', 1, 0,
          attempt, 'local', 1
        FROM j, p RETURNING id
      )
      INSERT INTO task_attempts (id, task_id, attempt_no, provider, model, client_request_id, submit_state)
      SELECT attempt, task, 1, 'runway', 'gen4.5', attempt::text, 'PREPARED' FROM j RETURNING task_id AS id`).pipe(
      Effect.map((rows) => rows.map((r) => r.id)),
      Effect.orDie
    )

/**
 * ResumeOnAcquire on a runner holding its one shard throughout, as its looks see it: the shard is never seen changing
 * hands. Only a lifecycle interrupted because the shard left (noted in TaskLifecycle.shardsLeft) tells it that the
 * shard went and came back between two looks. The Starts it sends are recorded.
 */
const setup = Effect.gen(function*() {
  const starts: Array<string> = []
  // every look asks once whether the one shard is held
  let looks = 0
  const shard = ShardId.make("default", 1)
  const lifecycle = TaskLifecycle.make({
    drive: () => Effect.void,
    recheck: () => Effect.void,
    parked: makeParkedTasks(),
    wakeParked: () => Effect.never,
    shardsLeft: makeShardsLeft()
  })
  const services = Layer.mergeAll(
    Layer.succeed(TaskLifecycle, lifecycle),
    Layer.succeed(
      TaskClient,
      TaskClient.make({
        send: () => Effect.die("not used"),
        sendWithin: (id) => Effect.sync(() => void starts.push(id)) as never
      })
    ),
    Layer.succeed(
      Sharding.Sharding,
      Sharding.Sharding.of({ hasShardId: () => (looks++, true), getShardId: () => shard } as never)
    ),
    ShardingConfig.layer({ shardsPerGroup: 1 })
  )
  yield* Layer.build(ResumeOnAcquireLive.pipe(Layer.provide(services)))
  return { starts, lifecycle, shard, looks: Effect.sync(() => looks) }
})

const startsReach = (starts: Array<string>, n: number) =>
  until(`${n} Starts`, Effect.sync(() => starts.length), (sent) => sent >= n)

describe.skipIf(noDatabase)("resuming the tasks of an acquired shard", () => {
  layer(MigrationsLive.pipe(Layer.provideMerge(layerTestDatabase())), {
    timeout: scaled(60_000),
    excludeTestServices: true
  })((it) => {
    it.scoped("a shard let go and held again between two looks has its tasks resumed again", () =>
      Effect.gen(function*() {
        const ids = yield* insertQueued(3)
        const { lifecycle, looks, shard, starts } = yield* setup
        // held at the first look: every live task is sent Start
        yield* startsReach(starts, 3)
        expect(new Set(starts)).toEqual(new Set(ids))
        // two more looks go by with the shard held throughout: nothing more
        const seen = yield* looks
        yield* until("two more looks", looks, (n) => n >= seen + 2)
        expect(starts.length).toBe(3)
        // a lifecycle interrupted because the shard left; by the next look the shard is held again
        lifecycle.shardsLeft.note(shard.toString())
        yield* startsReach(starts, 6)
        expect(new Set(starts.slice(3))).toEqual(new Set(ids))
      }))
  })
})
