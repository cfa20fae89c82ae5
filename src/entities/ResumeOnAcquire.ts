import { EntityId, ShardId, Sharding, ShardingConfig } from "@effect/cluster"
import { SqlClient } from "@effect/sql"
import { Duration, Effect, Layer, Metric, Schedule } from "effect"
import { TaskClient } from "./TaskClient.js"
import { wakeTasks } from "./wakeTasks.js"

const LOOK_EVERY = Duration.millis(500)
const PAGE = 5_000

const resumed = Metric.counter("tasks_resumed_on_acquire_total", {
  description: "live tasks woken at once because this runner acquired their shard (a drain, a handoff, a start)",
  incremental: true
})

/**
 * Tasks whose shard this runner has just acquired are woken at once, instead of when the sweeper finds their poll
 * overdue (SWEEP_GRACE plus QUOTA_MAX_WAIT later: measured, a drained runner's tasks then went unpolled for over
 * 30 s). Every LOOK_EVERY the runner compares the shards it holds with those it held; for newly held shards it pages
 * through the live tasks (keyset, PAGE at a time) and sends Start to those whose entity lives there. Waking is
 * idempotent (a running entity answers at once), so a look that repeats work costs only messages.
 */
export const ResumeOnAcquireLive = Layer.scopedDiscard(Effect.gen(function*() {
  const sharding = yield* Sharding.Sharding
  const sql = yield* SqlClient.SqlClient
  const tasks = yield* TaskClient
  const { shardsPerGroup } = yield* ShardingConfig.ShardingConfig
  // task entities live in the default shard group
  const shards = Array.from({ length: shardsPerGroup }, (_, i) => ShardId.make("default", i + 1))
  let held = new Set<string>()

  const liveTasksIn = (acquired: ReadonlySet<string>) =>
    Effect.gen(function*() {
      const ids: Array<string> = []
      let after = "00000000-0000-0000-0000-000000000000"
      while (true) {
        const page = yield* sql<{ id: string }>`
          SELECT id FROM generation_tasks
          WHERE terminal_at IS NULL AND status <> 'manual_review' AND id > ${after}::uuid
          ORDER BY id LIMIT ${PAGE}`
        for (const { id } of page) {
          if (acquired.has(sharding.getShardId(EntityId.make(id), "default").toString())) ids.push(id)
        }
        if (page.length < PAGE) return ids
        after = page[page.length - 1]!.id
      }
    })

  const look = Effect.gen(function*() {
    const now = new Set<string>()
    for (const shard of shards) if (sharding.hasShardId(shard)) now.add(shard.toString())
    const acquired = new Set([...now].filter((s) => !held.has(s)))
    if (acquired.size === 0) return void (held = now)
    const ids = yield* liveTasksIn(acquired)
    if (ids.length > 0) {
      yield* Effect.logInfo("waking the live tasks of acquired shards").pipe(
        Effect.annotateLogs({ shards: acquired.size, tasks: ids.length })
      )
      yield* wakeTasks(tasks, ids, "resume-on-acquire")
      yield* Metric.incrementBy(resumed, ids.length)
    }
    held = now
  })

  yield* look.pipe(
    Effect.catchAllCause((cause) =>
      Effect.logWarning("waking acquired tasks failed; the next look tries again", cause)
    ),
    Effect.repeat(Schedule.spaced(LOOK_EVERY)),
    Effect.forkScoped
  )
}))
