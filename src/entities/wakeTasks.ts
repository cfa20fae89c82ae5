import { Effect, Fiber } from "effect"
import type { TaskId } from "../schema/ids.js"
import type { TaskClient } from "./TaskClient.js"

/**
 * Activates one task entity (a Start message): an entity that is not running, or idle, starts its lifecycle from
 * PostgreSQL; one that is running answers at once. `granted`: a quota slot was taken for its next poll. True when
 * the entity answered within 5 s; best effort, the caller (or the next sweep) tries again.
 * The Start runs to its end in a fiber of its own, and only the wait for it gives up after 5 s. @effect/cluster builds
 * an entity in the fiber of the first message's sender: a sender interrupted mid-build (a timeout on a loaded runner,
 * its keep-alive write waiting for a pooled connection) left a half-built entity whose scope is never closed, and a
 * task that was parked no more, with no entity either, until the sweeper's grace and QUOTA_MAX_WAIT had passed.
 */
export const wakeTask = (tasks: TaskClient, id: string, traceId: string, granted = false) =>
  Effect.gen(function*() {
    const start = yield* Effect.forkDaemon(
      tasks.send(id as TaskId, (c) => c.Start(granted ? { traceId, granted } : { traceId })).pipe(
        // a send that hangs (a runner gone silent) is let go after a minute, builds included
        Effect.timeout("1 minute")
      )
    )
    yield* Fiber.join(start).pipe(Effect.timeout("5 seconds"))
    return true
  }).pipe(
    Effect.catchAllCause((cause) => Effect.as(Effect.logDebug("wake failed; tried again later", cause), false))
  )

/** Activates task entities (wakeTask), 16 at a time. */
export const wakeTasks = (tasks: TaskClient, ids: ReadonlyArray<string>, traceId: string) =>
  Effect.forEach(ids, (id) => wakeTask(tasks, id, traceId), { concurrency: 16, discard: true })
