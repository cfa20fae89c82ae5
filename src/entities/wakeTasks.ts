import { Effect } from "effect"
import type { TaskId } from "../schema/ids.js"
import type { TaskClient } from "./TaskClient.js"

/**
 * Activates one task entity (a Start message): an entity that is not running, or idle, starts its lifecycle from
 * PostgreSQL; one that is running answers at once. `granted`: a quota slot was taken for its next poll. True when
 * the entity answered within 5 s (the Start itself runs on: TaskClient.sendWithin); best effort, the caller (or the
 * next sweep) tries again.
 */
export const wakeTask = (tasks: TaskClient, id: string, traceId: string, granted = false) =>
  tasks.sendWithin(id as TaskId, (c) => c.Start(granted ? { traceId, granted } : { traceId }), "5 seconds").pipe(
    Effect.as(true),
    Effect.catchAllCause((cause) => Effect.as(Effect.logDebug("wake failed; tried again later", cause), false))
  )

/** Activates task entities (wakeTask), 16 at a time. */
export const wakeTasks = (tasks: TaskClient, ids: ReadonlyArray<string>, traceId: string) =>
  Effect.forEach(ids, (id) => wakeTask(tasks, id, traceId), { concurrency: 16, discard: true })
