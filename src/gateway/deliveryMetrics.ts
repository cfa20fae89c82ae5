/**
 * The metrics of one transport's open streams (seed 12.11.6), for the plain code of the raw routes: each call is a
 * synchronous update of the global registry, no fiber.
 */
import { deliverySeconds, heartbeatFailures, openStreams } from "../observability/metrics.js"
import { labelled } from "../observability/series.js"
import type { StreamEvent } from "../persistence/EventLog.js"

export const transportMetrics = (transport: "sse" | "ws") => {
  const latency = labelled(deliverySeconds, { transport })
  const open = labelled(openStreams, { transport })
  const heartbeat = labelled(heartbeatFailures, { transport })
  open.unsafeModify(0, []) // registered at 0: "no stream open" is a value, not a missing series
  return {
    /** A frame was written: its change's commit to now (live events only: a replayed one has no commit time). */
    delivered: (event: StreamEvent) => {
      if (event.committedAt !== undefined) latency.unsafeUpdate(Math.max(0, Date.now() - event.committedAt) / 1000, [])
    },
    opened: () => open.unsafeModify(1, []),
    closed: () => open.unsafeModify(-1, []),
    heartbeatFailed: () => heartbeat.unsafeUpdate(1, [])
  }
}
