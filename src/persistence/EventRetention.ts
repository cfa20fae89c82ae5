import { Singleton } from "@effect/cluster"
import { Effect, Layer } from "effect"
import * as S from "../config/Settings.js"
import { EventLog } from "./EventLog.js"
import { runPeriodically } from "./PeriodicLoop.js"

export const EventRetentionSettings = S.area("Event retention", "how long task events stay replayable", {
  retention: S.duration(
    "EVENT_RETENTION",
    "task events older than this are forgotten; a browser whose cursor is older gets a reset and a new snapshot",
    "7 days"
  ),
  interval: S.duration(
    "EVENT_RETENTION_INTERVAL",
    "how often old events and spent stream tokens are swept",
    "10 minutes"
  ),
  batch: S.integer("EVENT_RETENTION_BATCH", "events deleted per statement", 5000, { min: 1 })
})

/**
 * A cluster singleton that forgets task events older than EVENT_RETENTION (7 days) and spent stream tokens past
 * their expiry. Snapshots never need old events (the task row is the truth); a browser whose cursor is older
 * than what is kept gets an explicit reset and a new snapshot (seed 12.6.3).
 */
export const EventRetentionLive = Singleton.make(
  "EventRetention",
  Effect.gen(function*() {
    const log = yield* EventLog
    const { retention, interval, batch } = yield* EventRetentionSettings.config

    const sweep = Effect.gen(function*() {
      let forgotten = 0
      for (let n = batch; n === batch;) {
        n = yield* log.forget(retention, batch)
        forgotten += n
      }
      yield* log.forgetSpentTokens
      if (forgotten > 0) {
        yield* Effect.logInfo("event retention: forgot old events").pipe(Effect.annotateLogs({ forgotten }))
      }
    })
    yield* runPeriodically({ interval, failure: "event retention sweep failed", checks: [sweep] })
  })
).pipe(Layer.provide(EventLog.Default))
