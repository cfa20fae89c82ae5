import { SqlClient } from "@effect/sql"
import { Effect, Layer, Metric, Redacted } from "effect"
import pg from "pg"
import { layerPostgres } from "../../src/persistence/Database.js"
import { listeningGauge } from "../../src/persistence/WakeLoop.js"
import { services } from "./env.js"

/**
 * Tests that need PostgreSQL run whenever DATABASE_URL is set; in CI they must run, so a missing URL fails
 * loudly there instead of passing silently (env.ts). Locally, without the URL, they are skipped.
 */
export const databaseUrl: string | undefined = services.databaseUrl
export const noDatabase = databaseUrl === undefined

const admin = <A>(f: (client: pg.Client) => Promise<A>) =>
  Effect.promise(async () => {
    const client = new pg.Client({ connectionString: databaseUrl })
    await client.connect()
    try {
      return await f(client)
    } finally {
      await client.end()
    }
  })

/** A fresh database per test file (dropped afterwards): tables, cluster tables and advisory locks all isolated. */
export const makeTestDatabaseUrl = Effect.acquireRelease(
  Effect.gen(function*() {
    const name = `test_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 8)}`
    yield* admin((c) => c.query(`CREATE DATABASE ${name}`))
    const url = new URL(databaseUrl!)
    url.pathname = `/${name}`
    return { name, url: url.toString() }
  }),
  ({ name }) => admin((c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`))
)

export const layerTestDatabase = (maxConnections = 10) =>
  Layer.unwrapScoped(
    Effect.map(makeTestDatabaseUrl, ({ url }) =>
      layerPostgres({ url: Redacted.make(url), maxConnections, applicationName: "test" }))
  )

/** Whether this process's wake loop `loop` ("inbox processor", "outbox relay") has proven its LISTEN (WakeLoop.ts). */
export const wakeLoopListening = (loop: string) =>
  Metric.value(listeningGauge.pipe(Metric.tagged("loop", loop))).pipe(Effect.map((state) => state.value === 1))

/** Sessions of this database waiting on a lock: a writer blocked behind another transaction's row lock. */
export const lockWaiters = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql<{ n: number }>`
    SELECT count(*)::int AS n FROM pg_stat_activity
    WHERE datname = current_database() AND wait_event_type = 'Lock'`).pipe(
    Effect.map(([r]) => r!.n),
    Effect.orDie
  )
