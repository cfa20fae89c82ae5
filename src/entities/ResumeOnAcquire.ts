import { EntityId, ShardId, Sharding, ShardingConfig } from "@effect/cluster"
import { SqlClient } from "@effect/sql"
import { Duration, Effect, Layer, Metric, Schedule } from "effect"
import { TaskClient } from "./TaskClient.js"
import { TaskLifecycle } from "./TaskLifecycle.js"
import { wakeTask, wakeTasks } from "./wakeTasks.js"

const LOOK_EVERY = Duration.millis(500)
const PAGE = 5_000

const resumed = Metric.counter("tasks_resumed_on_acquire_total", {
  description: "live tasks woken at once because this runner acquired their shard (a drain, a handoff, a start)",
  incremental: true
})

interface LiveTask {
  readonly id: string
  readonly tenant_id: string
  readonly provider: string | null
  /** epoch ms; null unless the task waits for a poll (polling states with a provider job and a schedule) */
  readonly next_poll_ms: number | null
}

/**
 * Where this runner wakes its tasks (with the sweeper, a singleton, for what nobody does):
 * - its idle tasks (TaskLifecycle, ParkedTasks.ts) when their next poll is due, with their quota slot taken;
 * - tasks whose shard it has just acquired, at once, instead of when the sweeper finds their poll overdue
 *   (SWEEP_GRACE plus QUOTA_MAX_WAIT later: measured, a drained runner's tasks then went unpolled for over 30 s).
 *   Every LOOK_EVERY it compares the shards it holds with those it held; for newly held shards it pages through the
 *   live tasks (keyset, PAGE at a time): a task waiting for a poll is parked until its next_poll_at (idle, as on its
 *   last owner), any other is sent Start. Waking is idempotent (a running entity answers at once), so a look that
 *   repeats work costs only messages. A shard this runner let go while a lifecycle ran on it (shardsLeft.ts)
 *   counts as newly held if it is held again, however soon: a lock lost and taken back between two looks.
 */
export const ResumeOnAcquireLive = Layer.scopedDiscard(Effect.gen(function*() {
  const sharding = yield* Sharding.Sharding
  const sql = yield* SqlClient.SqlClient
  const tasks = yield* TaskClient
  const lifecycle = yield* TaskLifecycle
  const { shardsPerGroup } = yield* ShardingConfig.ShardingConfig
  // task entities live in the default shard group
  const shards = Array.from({ length: shardsPerGroup }, (_, i) => ShardId.make("default", i + 1))
  const shardOf = (id: string) => sharding.getShardId(EntityId.make(id), "default")
  let held = new Set<string>()

  const liveTasksIn = (acquired: ReadonlySet<string>) =>
    Effect.gen(function*() {
      const found: Array<LiveTask> = []
      let after = "00000000-0000-0000-0000-000000000000"
      while (true) {
        const page = yield* sql<LiveTask>`
          SELECT t.id, t.tenant_id, a.provider,
            CASE WHEN t.status IN ('submitted', 'running', 'provider_status_unknown')
              AND a.provider_task_id IS NOT NULL AND a.next_poll_at IS NOT NULL
              THEN (extract(epoch FROM a.next_poll_at) * 1000)::float8 END AS next_poll_ms
          FROM generation_tasks t LEFT JOIN task_attempts a ON a.id = t.current_attempt_id
          WHERE t.terminal_at IS NULL AND t.status <> 'manual_review' AND t.id > ${after}::uuid
          ORDER BY t.id LIMIT ${PAGE}`
        for (const task of page) if (acquired.has(shardOf(task.id).toString())) found.push(task)
        if (page.length < PAGE) return found
        after = page[page.length - 1]!.id
      }
    })

  const look = Effect.gen(function*() {
    // a shard let go since the last look counts as not held then, whether or not it is held again now
    for (const shard of lifecycle.shardsLeft.take()) held.delete(shard)
    const now = new Set<string>()
    for (const shard of shards) if (sharding.hasShardId(shard)) now.add(shard.toString())
    const acquired = new Set([...now].filter((s) => !held.has(s)))
    if (acquired.size === 0) return void (held = now)
    const found = yield* liveTasksIn(acquired)
    const waiting = found.filter((t) => t.next_poll_ms !== null && t.provider !== null)
    const others = found.filter((t) => t.next_poll_ms === null || t.provider === null).map((t) => t.id)
    if (found.length > 0) {
      yield* Effect.logInfo("waking the live tasks of acquired shards").pipe(
        Effect.annotateLogs({ shards: acquired.size, tasks: others.length, idle_until_next_poll: waiting.length })
      )
      for (const t of waiting) {
        lifecycle.parked.park(t.id, {
          dueAt: Number(t.next_poll_ms),
          scope: { provider: t.provider!, tenantId: t.tenant_id }
        })
      }
      yield* wakeTasks(tasks, others, "resume-on-acquire")
      yield* Metric.incrementBy(resumed, found.length)
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
  yield* lifecycle.wakeParked(
    (id) => wakeTask(tasks, id, "idle-wake", true),
    (id) => sharding.hasShardId(shardOf(id))
  ).pipe(Effect.forkScoped)
}))
