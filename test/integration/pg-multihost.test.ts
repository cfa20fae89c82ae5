import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Layer, Metric, Queue, Redacted, Schedule, type Scope, Stream } from "effect"
import { ownPostgres, ownReplica } from "../../drills/services.js"
import { hostSwitches as switches, layerPostgres } from "../../src/persistence/Database.js"
import { noDatabase } from "../support/database.js"
import { timeFactor } from "../support/env.js"

/**
 * DATABASE_URL with two hosts (libpq's form, target_session_attrs=read-write): a primary and its streaming replica,
 * clusters of this test's own (the machine's PostgreSQL is left alone). The replica is listed first: a read-only
 * session is passed over. After the primary stops and the replica is promoted, the same pool writes again, to the
 * promoted one, and LISTEN/NOTIFY works there too.
 */
const serverPort = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql<{ port: number }>`SELECT inet_server_port() AS port`
)
  .pipe(Effect.map(([r]) => r!.port))

const write = (note: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ port: number }>`INSERT INTO notes (note) VALUES (${note}) RETURNING inet_server_port() AS port`
  ).pipe(
    Effect.map(([r]) => r!.port)
  )

/** Until it succeeds (the failover is under way meanwhile), bounded. */
const eventually = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.retry(effect, {
    schedule: Schedule.spaced("100 millis").pipe(
      Schedule.upTo(Duration.times(Duration.seconds(30), timeFactor))
    )
  })

/**
 * A LISTEN held as the wake loops hold theirs (WakeLoop.ts: retried when its stream fails), and a probe that NOTIFYs
 * through the pool until the listener hears it.
 */
const heldListen = Effect.gen(function*() {
  const pg = yield* PgClient.PgClient
  const channel = `probe_${Math.random().toString(36).slice(2, 8)}`
  const heard = yield* Queue.unbounded<string>()
  yield* pg.listen(channel).pipe(
    Stream.runForEach((payload) => Queue.offer(heard, payload)),
    Effect.retry(Schedule.spaced("100 millis")),
    Effect.forkScoped
  )
  return (payload: string) =>
    eventually(
      pg`SELECT pg_notify(${channel}, ${payload})`.pipe(
        Effect.zipRight(Queue.take(heard).pipe(Effect.repeat({ until: (p) => p === payload }))),
        Effect.timeout("300 millis")
      )
    ).pipe(Effect.as(true))
})

describe.skipIf(noDatabase)("a DATABASE_URL with one or two hosts: writes and LISTEN follow the server", () => {
  it.live(
    "writes go to the writable host; after a failover the same pool writes to the promoted replica",
    () =>
      Effect.gen(function*() {
        const primary = yield* Effect.acquireRelease(
          Effect.promise(() => ownPostgres("pgmh-primary")),
          (p) => Effect.sync(() => p.remove())
        )
        const replica = yield* Effect.acquireRelease(
          Effect.promise(() => ownReplica("pgmh-replica", primary)),
          (r) => Effect.sync(() => r.remove())
        )
        const url = `postgres://postgres@127.0.0.1:${replica.port},127.0.0.1:${primary.port}/postgres` +
          `?target_session_attrs=read-write`
        const database = layerPostgres({ url: Redacted.make(url), maxConnections: 4, applicationName: "multihost" })
        const context = yield* Layer.build(database)
        const run = <A, E, R extends SqlClient.SqlClient | PgClient.PgClient | Scope.Scope>(
          effect: Effect.Effect<A, E, R>
        ) => Effect.provide(effect, context)

        yield* run(Effect.flatMap(SqlClient.SqlClient, (sql) => sql`CREATE TABLE notes (note text NOT NULL)`))
        expect(yield* run(write("before"))).toBe(primary.port)
        expect(yield* run(serverPort)).toBe(primary.port)
        const heard = yield* run(heldListen)
        expect(yield* run(heard("before"))).toBe(true)
        const switchesBefore = (yield* Metric.value(switches)).count

        // the primary is stopped; its replica is promoted
        yield* Effect.sync(() => primary.stop("fast"))
        yield* Effect.sync(() => replica.promote())

        expect(yield* run(eventually(write("after")))).toBe(replica.port)
        const notes = yield* run(
          Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ note: string }>`SELECT note FROM notes ORDER BY note`)
        )
        expect(notes.map((n) => n.note)).toEqual(["after", "before"])
        expect((yield* Metric.value(switches)).count).toBeGreaterThan(switchesBefore)
        // the LISTEN held across the failover hears the promoted server
        expect(yield* run(heard("after"))).toBe(true)
      }).pipe(Effect.scoped),
    { timeout: 180_000 * timeFactor }
  )

  it.live(
    "one host: a LISTEN held across a restart of the server hears it again (sql-pg's would stay deaf)",
    () =>
      Effect.gen(function*() {
        const server = yield* Effect.acquireRelease(
          Effect.promise(() => ownPostgres("pgmh-single")),
          (p) => Effect.sync(() => p.remove())
        )
        const url = `postgres://postgres@127.0.0.1:${server.port}/postgres`
        const database = layerPostgres({ url: Redacted.make(url), maxConnections: 4, applicationName: "singlehost" })
        const context = yield* Layer.build(database)
        const heard = yield* Effect.provide(heldListen, context)
        expect(yield* Effect.provide(heard("before"), context)).toBe(true)
        yield* Effect.sync(() => server.stop("fast"))
        yield* Effect.promise(() => server.start())
        expect(yield* Effect.provide(heard("after"), context)).toBe(true)
      }).pipe(Effect.scoped),
    { timeout: 180_000 * timeFactor }
  )
})
