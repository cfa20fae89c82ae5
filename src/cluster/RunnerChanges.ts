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
 *
 * Tried and left out (stop 39): a stopping runner marked itself leaving at once (a row every runner's overlay read as
 * a drain, and a NOTIFY), so that its shards moved while its listener and services were still closing (~0.28 s before
 * it leaves the list here). It was slower: SIGTERM → last task answering 1.19 s against 0.88 s (medians of 5,
 * bench:handoff, same machine, one after the other). A drained runner releases each shard on its own, two statements
 * on its one lock connection per shard after that shard's entities stop, and its event loop (closing its HTTP side
 * meanwhile) answered the first unlock 0.2 s late; the library's own stop releases every lock in one statement.
 */
export const LIBRARY_REFRESH_PAUSE = Duration.millis(10)

/** The longest one `getRunners` waits: the library fails a read of the list after 5 s (its own timeout). */
const MAX_WAIT = Duration.seconds(2)

const runnerListWakes = Metric.counter("cluster_runner_list_wakes_total", {
  description: "reads of the runner list brought forward by a runner joining or leaving (a NOTIFY), instead of " +
    "waiting for REFRESH_ASSIGNMENTS_INTERVAL",
  incremental: true
})

/**
 * `inner` whose `getRunners` waits out `interval` (at most MAX_WAIT a call) unless `wake` brings the read forward,
 * and whose `register` / `unregister` `announce` the change once committed.
 */
export const withRunnerChanges = (
  inner: RunnerStorage.RunnerStorage["Type"],
  options: {
    readonly interval: Duration.Duration
    readonly wake: Queue.Queue<void>
    readonly announce: (change: "joined" | "left") => Effect.Effect<void>
  }
): RunnerStorage.RunnerStorage["Type"] => {
  const { announce, interval, wake } = options
  const intervalMs = Duration.toMillis(interval)
  let lastRead = Number.NEGATIVE_INFINITY
  /**
   * This runner is stopping: its own reads are not brought forward any more. Woken by its own NOTIFY, it read
   * itself gone and released its shards one by one (an unlock each, as their entities stopped) instead of all at
   * once at the end of its stop: it exited later, and the survivor took the shards later (bench:handoff).
   */
  let leaving = false

  /** The list as last read: answered again when a wait ends with neither the interval out nor a wake. */
  type Listed = Effect.Effect.Success<typeof inner.getRunners>
  let last: Option.Option<Listed> = Option.none()

  /**
   * Waits for the interval (at most MAX_WAIT per call: the library gives a read 5 s), or a NOTIFY, then reads.
   * A wait cut off by MAX_WAIT answers the last list, unchanged; the library asks again 10 ms later.
   */
  const getRunners = Effect.gen(function*() {
    const left = () => Effect.map(Clock.currentTimeMillis, (now) => lastRead + intervalMs - now)
    const wait = Math.min(yield* left(), Duration.toMillis(MAX_WAIT))
    if (wait > 0) {
      const woken = leaving
        ? Option.none()
        : yield* Effect.timeoutOption(Queue.take(wake), Duration.millis(wait))
      if (Option.isSome(woken) && !leaving) {
        yield* Metric.increment(runnerListWakes)
        yield* Effect.logDebug("runner list read early: a runner joined or left")
      } else {
        // not woken (or this runner left meanwhile: its own NOTIFY must not bring its reads forward)
        const rest = Math.min(yield* left(), Duration.toMillis(MAX_WAIT))
        if (rest > 0 && leaving) yield* Effect.sleep(Duration.millis(rest))
        if ((yield* left()) > 0 && Option.isSome(last)) return last.value
      }
    } else {
      // a wake that came while nobody waited is answered by this read
      yield* Queue.poll(wake)
    }
    const runners = yield* inner.getRunners
    lastRead = yield* Clock.currentTimeMillis
    last = Option.some(runners)
    return runners
  })

  return RunnerStorage.RunnerStorage.of({
    ...inner,
    getRunners,
    register: (runner, healthy) =>
      Effect.tap(inner.register(runner, healthy), () => {
        // the library registers when the list it read lacks this runner: the next read must see the new row
        lastRead = Number.NEGATIVE_INFINITY
        return announce("joined")
      }),
    unregister: (address) =>
      Effect.zipRight(
        Effect.sync(() => (leaving = true)),
        Effect.tap(inner.unregister(address), () => announce("left"))
      )
  })
}

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
      // after the change is committed; a NOTIFY lost (or refused) costs the others one interval, nothing else
      const announce = (change: "joined" | "left") =>
        sql`SELECT pg_notify(${RUNNERS_CHANNEL}, ${change})`.pipe(
          Effect.catchAll((error) => Effect.logWarning("could not announce a runner list change", error)),
          Effect.asVoid
        )

      return withRunnerChanges(inner, { interval, wake, announce })
    })
  )
