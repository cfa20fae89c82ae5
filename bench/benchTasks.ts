/** Tasks for the entity benches: bench:transitions in one process and across processes (transitionsAcross.ts). */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import type { AttemptId, TaskId } from "../src/schema/ids.js"
import type { NormalizedStatus, ProviderObservation } from "../src/schema/observation.js"
import { admitTask, observation } from "../test/support/tasks.js"

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

export type Step = { readonly status: NormalizedStatus; readonly progress: number | null }

/** One task's provider history: queued, running 5..95 in steps of 5, succeeded: 21 committed transitions. */
export const history: ReadonlyArray<Step> = [
  { status: "queued", progress: null },
  ...Array.from({ length: 19 }, (_, i) => ({ status: "running" as const, progress: (i + 1) * 5 })),
  { status: "succeeded", progress: null }
]

/** Its "running" steps alone: a webhook's progress, changes that leave a task in flight polling (parked). */
export const parkedWalk = history.slice(1, -1)

/**
 * The observations a provider reports along `walk` for each task (status, progress, sequence number), built a task at
 * a time with a yield between: 4,200 Schema constructions in one go stall the loop for 1–3 s, which the lag figures
 * would count against the entity. Built before timing starts: senders decode once at the edge.
 */
export const observationsOf = (tasks: ReadonlyArray<BenchTask>, walk: ReadonlyArray<Step>) =>
  Effect.map(
    Effect.forEach(tasks, (t) =>
      Effect.zipLeft(
        Effect.sync(() =>
          [
            t.taskId,
            walk.map((step, i) =>
              observation(t.attemptId, step.status, {
                ...(step.progress === null ? {} : { progress: step.progress }),
                seq: i + 1,
                eventId: `${t.attemptId}-${i}`
              })
            )
          ] as const
        ),
        Effect.yieldNow()
      )),
    (entries) => new Map<TaskId, ReadonlyArray<ProviderObservation>>(entries)
  )
