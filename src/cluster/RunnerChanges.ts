import { RunnerStorage } from "@effect/cluster"
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { Clock, Duration, Effect, Layer, Metric, Option, Queue } from "effect"
import { RUNNERS_CHANNEL } from "../persistence/channels.js"
import { EmbeddedDatabase } from "../persistence/Database.js"
import { listenForWakes, listeningGauge } from "../persistence/WakeLoop.js"

/**
 * A runner joining or leaving the runner list is heard at once by the others, not at their next read of the list.
 *
 * The library reads the runner list every REFRESH_ASSIGNMENTS_INTERVAL (Sharding's "RunnerStorage sync" loop) and
 * moves shards only then. A runner stopping gracefully leaves the list first, stops its entities, then releases its
 * shard locks (~0.2 s in bench:handoff); a survivor noticed the departure up to a whole interval later: SIGTERM → last
 * task answering on the survivor took 1.03–1.11 s at the 1 s default, most of it that wait.
 *
 * Here `register` and `unregister` NOTIFY on RUNNERS_CHANNEL once they are committed, and every runner LISTENs on it.
 * The library's own pause is made short (LIBRARY_REFRESH_PAUSE) and the interval is waited out in `getRunners`
 * instead, which returns early when a NOTIFY comes: the list is read at once, and the shards move (PromptAcquire.ts
 * takes those still being released as soon as they are free). Without LISTEN (the embedded database) or with a lost
 * NOTIFY, the interval is the interval, as before.
 */
export const LIBRARY_REFRESH_PAUSE = Duration.millis(10)

const runnerListWakes = Metric.counter("cluster_runner_list_wakes_total", {
  description: "reads of the runner list brought forward by a runner joining or leaving (a NOTIFY), instead of " +
    "waiting for REFRESH_ASSIGNMENTS_INTERVAL",
  incremental: true
})

/** The RunnerStorage below, announcing its runner's joins and leaves and reading the list early on others'. */
export const layerRunnerChanges = (interval: Duration.Duration) =>
  Layer.scoped(
    RunnerStorage.RunnerStorage,
    Effect.gen(function*() {
      const inner = yield* RunnerStorage.RunnerStorage
      const sql = yield* SqlClient.SqlClient
      const wake = yield* Queue.sliding<void>(1)
      const pg = yield* Effect.serviceOption(PgClient.PgClient)
      if (Option.isSome(pg) && !(yield* EmbeddedDatabase)) {
        const listening = listeningGauge.pipe(Metric.tagged("loop", "runner list"))
        yield* Effect.forkScoped(listenForWakes(pg.value, RUNNERS_CHANNEL, "runner list", listening, wake))
      }
      const intervalMs = Duration.toMillis(interval)
      let lastRead = Number.NEGATIVE_INFINITY
      /**
       * This runner is stopping: its own reads are not brought forward any more. Woken by its own NOTIFY, it read
       * itself gone and released its shards one by one (an unlock each, as their entities stopped) instead of all at
       * once at the end of its stop: it exited later, and the survivor took the shards later (bench:handoff).
       */
      let leaving = false

      const getRunners = Effect.gen(function*() {
        const left = lastRead + intervalMs - (yield* Clock.currentTimeMillis)
        if (left > 0 && leaving) {
          yield* Effect.sleep(Duration.millis(left))
        } else if (left > 0) {
          const woken = yield* Effect.timeoutOption(Queue.take(wake), Duration.millis(left))
          if (Option.isSome(woken)) yield* Metric.increment(runnerListWakes)
        } else {
          // a wake that came while nobody waited is answered by this read
          yield* Queue.poll(wake)
        }
        const runners = yield* inner.getRunners
        lastRead = yield* Clock.currentTimeMillis
        return runners
      })

      // after the change is committed; a NOTIFY lost (or refused) costs the others one interval, nothing else
      const announce = (change: "joined" | "left") =>
        sql`SELECT pg_notify(${RUNNERS_CHANNEL}, ${change})`.pipe(
          Effect.catchAll((error) => Effect.logWarning("could not announce a runner list change", error)),
          Effect.asVoid
        )

      return RunnerStorage.RunnerStorage.of({
        ...inner,
        getRunners,
        register: (runner, healthy) => Effect.tap(inner.register(runner, healthy), () => announce("joined")),
        unregister: (address) =>
          Effect.zipRight(
            Effect.sync(() => (leaving = true)),
            Effect.tap(inner.unregister(address), () => announce("left"))
          )
      })
    })
  )
