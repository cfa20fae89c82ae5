import { Singleton } from "@effect/cluster"
import { SqlClient } from "@effect/sql"
import { Config, Duration, Effect } from "effect"
import { QuotaMaxWait } from "../quota/ProviderQuota.js"
import { TaskClient } from "./TaskClient.js"
import { wakeTasks } from "./wakeTasks.js"

/**
 * A cluster singleton that wakes tasks whose due work nobody is doing (seed 12.8.5): an attempt whose poll is
 * overdue with no poll lease held, or a task stuck in a step of its own (submission, output) for longer than
 * SWEEP_GRACE. Their entity was evicted, lost its runner, or never got its Start; waking it restarts its
 * lifecycle from PostgreSQL. So no task depends on staying in memory.
 */
export const SweeperLive = Singleton.make(
  "TaskSweeper",
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const tasks = yield* TaskClient
    const interval = yield* Config.duration("SWEEP_INTERVAL").pipe(Config.withDefault(Duration.seconds(5)))
    const grace = yield* Config.duration("SWEEP_GRACE").pipe(Config.withDefault(Duration.seconds(10)))
    const batch = yield* Config.integer("SWEEP_BATCH").pipe(Config.withDefault(500))
    const graceSeconds = Duration.toSeconds(grace)
    // a poll may legitimately wait this long for its quota slot before it takes its lease
    const quotaWait = yield* QuotaMaxWait
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
      ORDER BY COALESCE(a.next_poll_at, t.updated_at)
      LIMIT ${batch}`

    yield* Effect.gen(function*() {
      const rows = yield* due
      if (rows.length > 0) {
        yield* Effect.logInfo("sweeper waking tasks with overdue work").pipe(
          Effect.annotateLogs({ count: rows.length })
        )
        yield* wakeTasks(tasks, rows.map((r) => r.id), "sweeper")
      }
    }).pipe(
      Effect.catchAllCause((cause) => Effect.logWarning("sweep failed", cause)),
      Effect.zipRight(Effect.sleep(interval)),
      Effect.forever
    )
  })
)
