import { PgClient } from "@effect/sql-pg"
import { Deferred, Duration, Effect, Metric, Queue, Schedule, type Scope, Stream } from "effect"
import { type Backoff, backoff, backoffSchedule } from "../domain/backoff.js"
import { EmbeddedDatabase } from "./Database.js"

/**
 * The one drain loop woken by PostgreSQL (the callback inbox, the outbox): LISTEN on the table's channel wakes it at
 * once; a sweep every `sweep` is the safety net for a lost NOTIFY or a lost LISTEN connection; a failed drain waits
 * the one backoff before trying again. The first drain waits (a few seconds at most) until a NOTIFY of its own has
 * come back, so no row can fall between the LISTEN and the first drain; the gauge `wake_loop_listening{loop}` says
 * whether the LISTEN is proven (1) or lost (0). `drain` answers how many rows it took: a full batch runs again at
 * once, anything less waits for a wake or the sweep.
 *
 * On the embedded PGlite there is no LISTEN: its pool of 2 has no connection to spare (the cluster keeps one for its
 * locks), and trying printed a warning with a stack trace every retry, forever. There the sweep is the loop's only
 * wake (1 s by default), and the database's start line says so once (Database.ts).
 */
export const runWakeLoop = <E, R>(options: {
  readonly name: string
  readonly channel: string
  readonly sweep: Duration.Duration
  readonly batchSize: number
  readonly backoff: Backoff
  readonly drain: Effect.Effect<number, E, R>
  /** Woken by offers to this queue too (the drain's own work, settling later, can call for another drain). */
  readonly wake?: Queue.Queue<void>
}): Effect.Effect<never, never, R | PgClient.PgClient | Scope.Scope> =>
  Effect.gen(function*() {
    const pg = yield* PgClient.PgClient
    const wake = options.wake ?? (yield* Queue.sliding<void>(1))
    const listening = listeningGauge.pipe(Metric.tagged("loop", options.name))
    yield* Metric.set(listening, 0)
    if (!(yield* EmbeddedDatabase)) yield* listenForWakes(pg, options.channel, options.name, listening, wake)
    let failures = 0
    return yield* Effect.gen(function*() {
      const drained = yield* options.drain.pipe(Effect.sandbox, Effect.either)
      if (drained._tag === "Left") {
        const wait = backoff(failures, options.backoff)
        failures++
        if (failures === 1 || failures % 10 === 0) {
          yield* Effect.logWarning(`${options.name} cannot drain: rows wait in PostgreSQL`, drained.left).pipe(
            Effect.annotateLogs({ failures, backoff_ms: Math.round(Duration.toMillis(wait)) })
          )
        }
        return yield* Effect.sleep(wait)
      }
      if (failures > 0) yield* Effect.logInfo(`${options.name} draining again`).pipe(Effect.annotateLogs({ failures }))
      failures = 0
      if (drained.right < options.batchSize) yield* Effect.ignore(Effect.timeout(Queue.take(wake), options.sweep))
    }).pipe(Effect.forever)
  })

/**
 * LISTEN on `channel`, each NOTIFY a wake; returns once a NOTIFY of its own has come back (bounded: a few seconds),
 * so no row can fall between the LISTEN and the first drain. Warns once per outage, not once per retry.
 */
export const listenForWakes = (
  pg: PgClient.PgClient,
  channel: string,
  name: string,
  listening: Metric.Metric.Gauge<number>,
  wake: Queue.Queue<void>
): Effect.Effect<void, never, Scope.Scope> =>
  Effect.gen(function*() {
    const heard = yield* Deferred.make<void>()
    let listenLost = 0
    yield* pg.listen(channel).pipe(
      Stream.runForEach(() => {
        listenLost = 0
        return Effect.all([Metric.set(listening, 1), Deferred.succeed(heard, undefined), Queue.offer(wake, undefined)])
      }),
      Effect.tapErrorCause((cause) =>
        // once per outage, not once per retry: the sweep carries on meanwhile
        Effect.zipRight(
          Metric.set(listening, 0),
          ++listenLost === 1
            ? Effect.logWarning(`${name} LISTEN lost; the sweep carries on`, cause)
            : Effect.void
        )
      ),
      Effect.retry(backoffSchedule({ base: Duration.seconds(1), cap: Duration.seconds(30) })),
      Effect.forkScoped
    )
    // LISTEN before the first drain: a NOTIFY of our own proves it (bounded, for where LISTEN cannot work)
    yield* pg`SELECT pg_notify(${channel}, 'probe')`.pipe(
      Effect.zipRight(Deferred.await(heard).pipe(Effect.timeout(Duration.millis(200)))),
      Effect.retry(Schedule.recurs(25)),
      Effect.tapError(() => Effect.logWarning(`${name} LISTEN not proven; draining on the sweep meanwhile`)),
      Effect.ignore
    )
  })

/** 1 while a wake loop's LISTEN is proven (a NOTIFY came back to it), 0 before that and while it is lost. */
export const listeningGauge = Metric.gauge("wake_loop_listening", {
  description: "1 while a wake loop's LISTEN is proven (a NOTIFY came back to it), 0 before that and while it is lost"
})
