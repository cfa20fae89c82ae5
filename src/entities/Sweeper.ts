import { Singleton } from "@effect/cluster"
import { SqlClient } from "@effect/sql"
import { Duration, Effect } from "effect"
import * as S from "../config/Settings.js"
import { runPeriodically } from "../persistence/PeriodicLoop.js"
import { QuotaSettings } from "../quota/ProviderQuota.js"
import { TaskClient } from "./TaskClient.js"
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

/**
 * A cluster singleton that wakes tasks whose due work nobody is doing (seed 12.8.5): an attempt whose poll is
 * overdue with no poll lease held, or a task stuck in a step of its own (submission, output) for longer than
 * SWEEP_GRACE. Their entity was evicted, lost its runner, or never got its Start; waking it restarts its
 * lifecycle from PostgreSQL. So no task depends on staying in memory.
 * Steps of a task's own (a submission, an output) come first in a batch, overdue polls after them: under a provider
 * quota that cannot keep up, polls are late by design, and ordered by due time alone they filled every batch while
 * queued tasks waited (bench:polling: 8.5 submissions/s at 7,500 tasks). A late poll whose runner holds it parked,
 * in the quota's line, is not disturbed by the Start (GenerationTaskLive, ParkedTasks.holds).
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

    const due = sql<{ id: string }>`
      SELECT t.id FROM generation_tasks t
      JOIN task_attempts a ON a.id = t.current_attempt_id
      WHERE t.terminal_at IS NULL AND t.status <> 'manual_review'
        AND (a.poll_lease_until IS NULL OR a.poll_lease_until < now())
        AND CASE
          WHEN a.next_poll_at IS NOT NULL AND a.submit_state IN ('SUBMITTED', 'RUNNING', 'SUBMIT_UNKNOWN')
            THEN a.next_poll_at < now() - make_interval(secs => ${pollGraceSeconds})
          ELSE t.updated_at < now() - make_interval(secs => ${graceSeconds})
        END
      ORDER BY a.next_poll_at IS NOT NULL AND a.submit_state IN ('SUBMITTED', 'RUNNING', 'SUBMIT_UNKNOWN'),
        COALESCE(a.next_poll_at, t.updated_at)
      LIMIT ${batch}`

    const sweep = Effect.gen(function*() {
      const rows = yield* due
      if (rows.length > 0) {
        yield* Effect.logInfo("sweeper waking tasks with overdue work").pipe(
          Effect.annotateLogs({ count: rows.length })
        )
        yield* wakeTasks(tasks, rows.map((r) => r.id), "sweeper")
      }
    })
    yield* runPeriodically({ interval, failure: "sweep failed", checks: [sweep] })
  })
)
