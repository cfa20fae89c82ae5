import { Effect } from "effect"
import type { EventSource } from "../schema/events.js"
import type { TaskSnapshot } from "../schema/task.js"

/**
 * One INFO line per committed status change of a task (and its creation, from nothing to queued), written where the
 * change commits: an operator follows a task, or a trace, through its states with `task_id` or `trace_id`.
 * Progress within a status is not logged (it changes every few seconds per task).
 */
export const logStatusChange = (
  from: TaskSnapshot["status"] | null,
  task: TaskSnapshot,
  meta: { readonly source: EventSource; readonly traceId: string }
): Effect.Effect<void> =>
  from === task.status
    ? Effect.void
    : Effect.logInfo(`task ${from ?? "created"} -> ${task.status}`).pipe(
      Effect.annotateLogs({
        task_id: task.id,
        trace_id: meta.traceId,
        from: from ?? "none",
        to: task.status,
        version: task.version,
        source: meta.source
      })
    )
