import { Singleton } from "@effect/cluster"
import { SqlClient } from "@effect/sql"
import { Clock, Duration, Effect, Metric, Option } from "effect"
import * as S from "../config/Settings.js"
import { runPeriodically } from "../persistence/PeriodicLoop.js"
import { QuotaSettings } from "../quota/ProviderQuota.js"
import { TaskClient } from "./TaskClient.js"
import { TaskLifecycle } from "./TaskLifecycle.js"
import { wakeTasks } from "./wakeTasks.js"

export const SweeperSettings = S.area("Sweeper", "waking tasks whose due work nobody is doing", {
  interval: S.duration("SWEEP_INTERVAL", "how often the sweeper looks for tasks to wake", "5 seconds"),
  grace: S.duration(
    "SWEEP_GRACE",
    "how long past due (a poll, plus QUOTA_MAX_WAIT) or in a step of its own a task may be before it is woken",
    "10 seconds"
  ),
  batch: S.integer("SWEEP_BATCH", "tasks woken per sweep", 500, { min: 1 })
})

const sweepsHeld = Metric.counter("sweeper_tasks_held_here_total", {
  description: "overdue tasks the sweeper found held parked or in the quota line by its own runner, and left there",
  incremental: true
})

/** A due task and its place in the sweeper's order (its own step before polls, then by due time and id). */
export interface DueRow {
  readonly id: string
  readonly own: boolean
  /** the due time as PostgreSQL wrote it (microseconds: a Date would round them off) */
  readonly due_at: string
}

/**
 * One page of the tasks due for a wake, in the sweeper's order, after `from` (null: from the first): a task's own
 * steps before polls, then by due time and id.
 */
export const duePage = (
  sql: SqlClient.SqlClient,
  { batch, graceSeconds, pollGraceSeconds }: {
    readonly batch: number
    readonly graceSeconds: number
    readonly pollGraceSeconds: number
  }
) =>
(from: DueRow | null) =>
  sql<DueRow>`
        SELECT id, own, due_at FROM (
          SELECT t.id, t.updated_at, a.next_poll_at, a.poll_lease_until,
            NOT (a.next_poll_at IS NOT NULL AND a.submit_state IN ('SUBMITTED', 'RUNNING', 'SUBMIT_UNKNOWN')) AS own,
            COALESCE(a.next_poll_at, t.updated_at) AS due,
            COALESCE(a.next_poll_at, t.updated_at)::text AS due_at
          FROM generation_tasks t
          JOIN task_attempts a ON a.id = t.current_attempt_id
          WHERE t.terminal_at IS NULL AND t.status <> 'manual_review'
        ) d
        WHERE (poll_lease_until IS NULL OR poll_lease_until < now())
          AND CASE
            WHEN own THEN updated_at < now() - make_interval(secs => ${graceSeconds})
            ELSE next_poll_at < now() - make_interval(secs => ${pollGraceSeconds})
          END
          ${
    from === null
      ? sql``
      : sql`AND (NOT own, due, id) > (${!from.own}::boolean, ${from.due_at}::timestamptz, ${from.id}::uuid)`
  }
        ORDER BY NOT own, due, id
        LIMIT ${batch}`

/**
 * A cluster singleton that wakes tasks whose due work nobody is doing (seed 12.8.5): an attempt whose poll is
 * overdue with no poll lease held, or a task stuck in a step of its own (submission, output) for longer than
 * SWEEP_GRACE. Their entity was evicted, lost its runner, or never got its Start; waking it restarts its
 * lifecycle from PostgreSQL. So no task depends on staying in memory.
 * Steps of a task's own (a submission, an output) come first, overdue polls after them, and each sweep goes on where
 * the last one stopped (SWEEP_BATCH at a time, round and round). Under a provider quota that cannot keep up, polls
 * are late by design: the same earliest SWEEP_BATCH tasks, waiting in the quota's line and left there by the Start
 * (GenerationTaskLive, ParkedTasks.holds), filled every batch, and no sweep reached the tasks behind them
 * (bench:polling, 10,000 tasks at 100 queries/s).
 */
export const SweeperLive = Singleton.make(
  "TaskSweeper",
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const tasks = yield* TaskClient
    const { batch, grace, interval } = yield* SweeperSettings.config
    const graceSeconds = Duration.toSeconds(grace)
    // a poll may legitimately wait this long for its quota slot before it takes its lease
    const { maxWait: quotaWait } = yield* QuotaSettings.config
    const pollGraceSeconds = graceSeconds + Duration.toSeconds(quotaWait)

    // on a runner that hosts tasks: those it holds parked or in its quota line are not sent a Start, which would
    // build their entity only for it to find the task held (under a quota that cannot keep up, polls are late past
    // the grace, and bench:polling's sweeps built 200 entities a second that way)
    const lifecycle = yield* Effect.serviceOption(TaskLifecycle)
    const notHeldHere = (ids: ReadonlyArray<string>, now: number) =>
      Option.match(lifecycle, {
        onNone: () => ids,
        onSome: ({ parked }) => ids.filter((id) => !parked.holds(id, now))
      })

    const due = duePage(sql, { batch, graceSeconds, pollGraceSeconds })
    /** Where the last sweep stopped in the due tasks' order: the next one goes on from there, to the end and round. */
    let after: DueRow | null = null
    const sweep = Effect.gen(function*() {
      const rows = yield* due(after)
      // a short page is the end of the due tasks: the next sweep starts from the first again
      after = rows.length < batch ? null : rows[rows.length - 1]!
      const ids = notHeldHere(rows.map((r) => r.id), yield* Clock.currentTimeMillis)
      if (rows.length > ids.length) yield* Metric.incrementBy(sweepsHeld, rows.length - ids.length)
      if (ids.length > 0) {
        yield* Effect.logInfo("sweeper waking tasks with overdue work").pipe(
          Effect.annotateLogs({ count: ids.length, held_here: rows.length - ids.length })
        )
        yield* wakeTasks(tasks, ids, "sweeper")
      }
    })
    yield* runPeriodically({ interval, failure: "sweep failed", checks: [sweep] })
  })
)
