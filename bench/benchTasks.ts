/** Tasks for the entity benches: bench:transitions in one process and across processes (transitionsAcross.ts). */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import type { AttemptId, TaskId } from "../src/schema/ids.js"
import { admitTask } from "../test/support/tasks.js"

export type BenchTask = { readonly taskId: TaskId; readonly attemptId: AttemptId }

/** `n` tasks admitted (queued), 16 at a time. */
export const admitMany = (n: number) =>
  Effect.forEach(Array.from({ length: n }), () => admitTask(), { concurrency: 16 })

/**
 * The tasks in flight as a submission leaves them (submitted, the provider's job known: the observations' job id),
 * their next poll an hour away: written before any message builds their entities, which read them as they start.
 */
export const inFlight = (tasks: ReadonlyArray<BenchTask>) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.zipRight(
      sql`UPDATE generation_tasks SET status = 'submitted' WHERE id IN ${sql.in(tasks.map((t) => t.taskId))}`,
      sql`UPDATE task_attempts SET provider_task_id = 'job-' || id, submit_state = 'SUBMITTED',
            next_poll_at = now() + interval '1 hour'
          WHERE id IN ${sql.in(tasks.map((t) => t.attemptId))}`
    )).pipe(Effect.orDie)
