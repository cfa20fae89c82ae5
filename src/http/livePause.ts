import { Effect } from "effect"
import { allows, type SystemMode } from "../domain/systemModes.js"
import type { WriteFence } from "../persistence/WriteFence.js"

/**
 * While the system mode pauses live notifications (DEGRADED_NOTIFY), `endAll` is called once a second with the mode:
 * each transport tells its open streams why and ends them (SSE `event: mode`, a WebSocket `mode` message and close
 * 1013). The browser client then reads snapshots, and when streams are allowed again resumes from its cursor:
 * task_events kept every change meanwhile. A scoped fiber: it stops with the transport's layer.
 */
export const endStreamsWhileLivePaused = (fence: WriteFence, endAll: (mode: SystemMode) => void) =>
  Effect.sync(() => {
    const { mode } = fence.view()
    if (!allows(mode, "liveNotifications")) endAll(mode)
  }).pipe(Effect.zipRight(Effect.sleep("1 second")), Effect.forever, Effect.forkScoped)
