import { Singleton } from "@effect/cluster"
import { Config, Duration, Effect, Layer } from "effect"
import { EventLog } from "./EventLog.js"

/**
 * A cluster singleton that forgets task events older than EVENT_RETENTION (7 days) and spent stream tokens past
 * their expiry. Snapshots never need old events (the task row is the truth); a browser whose cursor is older
 * than what is kept gets an explicit reset and a new snapshot (seed 12.6.3).
 */
export const EventRetentionLive = Singleton.make(
  "EventRetention",
  Effect.gen(function*() {
    const log = yield* EventLog
    const retention = yield* Config.duration("EVENT_RETENTION").pipe(Config.withDefault(Duration.days(7)))
    const interval = yield* Config.duration("EVENT_RETENTION_INTERVAL").pipe(Config.withDefault(Duration.minutes(10)))
    const batch = yield* Config.integer("EVENT_RETENTION_BATCH").pipe(Config.withDefault(5000))

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
    yield* sweep.pipe(
      Effect.catchAllCause((cause) => Effect.logWarning("event retention sweep failed", cause)),
      Effect.zipRight(Effect.sleep(interval)),
      Effect.forever
    )
  })
).pipe(Layer.provide(EventLog.Default))
