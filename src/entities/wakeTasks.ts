import { Effect } from "effect"
import type { TaskId } from "../schema/ids.js"
import type { TaskClient } from "./TaskClient.js"

/**
 * Activates task entities (a Start message): an entity that is not running starts its lifecycle from
 * PostgreSQL; one that is running answers at once. Best effort: the next sweep tries again.
 */
export const wakeTasks = (tasks: TaskClient, ids: ReadonlyArray<string>, traceId: string) =>
  Effect.forEach(
    ids,
    (id) =>
      tasks.send(id as TaskId, (c) => c.Start({ traceId })).pipe(
        Effect.timeout("5 seconds"),
        Effect.catchAllCause((cause) => Effect.logDebug("wake failed; the next sweep retries", cause))
      ),
    { concurrency: 16, discard: true }
  )
