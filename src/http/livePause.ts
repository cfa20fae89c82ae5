import { Effect } from "effect"
import { allows, type SystemMode } from "../domain/systemModes.js"
import type { WriteFence } from "../persistence/WriteFence.js"

/**
 * While the system mode pauses live notifications (DEGRADED_NOTIFY), `endAll` runs once a second with the mode:
 * each transport tells its open streams why and ends them (SSE `event: mode`, a WebSocket `mode` message and close
 * 1013). The browser client then reads snapshots, and when streams are allowed again resumes from its cursor:
 * task_events kept every change meanwhile. A scoped fiber: it stops with the transport's layer.
 */
export const endStreamsWhileLivePaused = (fence: WriteFence, endAll: (mode: SystemMode) => Effect.Effect<void>) =>
  Effect.suspend(() => {
    const { mode } = fence.view()
    return allows(mode, "liveNotifications") ? Effect.void : endAll(mode)
  }).pipe(Effect.zipRight(Effect.sleep("1 second")), Effect.forever, Effect.forkScoped)
