import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import * as Migrator from "@effect/sql/Migrator"
import { SqlError } from "@effect/sql/SqlError"
import { PGlite } from "@electric-sql/pglite"
import { PGLiteSocketServer } from "@electric-sql/pglite-socket"
import {
  Config,
  ConfigError,
  Context,
  Duration,
  Effect,
  Either,
  Layer,
  Metric,
  Option,
  Redacted,
  Runtime,
  Schedule,
  type Stream
} from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import pg from "pg"
import type * as Pg from "pg"
import core from "../../migrations/0001_core.js"
import commitTaskChange from "../../migrations/0002_commit_task_change.js"
import commitTaskChanges from "../../migrations/0003_commit_task_changes.js"
import inboxAttempt from "../../migrations/0004_inbox_attempt.js"
import inboxBody from "../../migrations/0005_inbox_body.js"
import lifecycle from "../../migrations/0006_lifecycle.js"
import propagation from "../../migrations/0007_propagation.js"
import eventStreams from "../../migrations/0008_event_streams.js"
import projectOwners from "../../migrations/0009_project_owners.js"
import inboxTrace from "../../migrations/0010_inbox_trace.js"
import inboxDeadIndex from "../../migrations/0011_inbox_dead_index.js"
import operations from "../../migrations/0012_operations.js"
import runnerControls from "../../migrations/0013_runner_controls.js"
import outboxUnpublishedOrder from "../../migrations/0014_outbox_unpublished_order.js"
import submissionSlotAcquire from "../../migrations/0015_submission_slot_acquire.js"
import lateAttemptResults from "../../migrations/0016_late_attempt_results.js"
import tokenRevocations from "../../migrations/0017_token_revocations.js"
import * as S from "../config/Settings.js"
import { OwnSessions } from "./OwnSessions.js"
import { formatHost, parseDsn } from "./pgHosts.js"
import { listenOnOwnClient } from "./pgListen.js"
import { makePool, type PoolSession, trackSessions } from "./pgPool.js"

/**
 * int8 (20) as a JS number where that is exact: our versions, cursors and counters stay far below 2^53. A larger one
 * stays the text pg gives: @effect/cluster's snowflake ids (cluster_messages, cluster_replies) are above 2^57 and
 * read back through BigInt(text). As numbers they were rounded to a multiple of 32: keep-alives of different tasks
 * came back with one request id, their replies were saved against the wrong message (unique violations, retried
 * four times each: ~70 failed transactions/s in bench:polling) and the right ones were never marked processed.
 */
const parseInt8 = (text: string): number | string => {
  const n = Number(text)
  return Number.isSafeInteger(n) ? n : text
}
const INT8_OID = 20
const types: Pg.CustomTypesConfig = {
  getTypeParser: ((oid: number, format?: "text" | "binary") =>
    oid === INT8_OID && format !== "binary"
      ? parseInt8
      : (pg.types.getTypeParser as (oid: number, format?: string) => unknown)(oid, format)) as never
}

const migrations = {
  "0001_core": core,
  "0002_commit_task_change": commitTaskChange,
  "0003_commit_task_changes": commitTaskChanges,
  "0004_inbox_attempt": inboxAttempt,
  "0005_inbox_body": inboxBody,
  "0006_lifecycle": lifecycle,
  "0007_propagation": propagation,
  "0008_event_streams": eventStreams,
  "0009_project_owners": projectOwners,
  "0010_inbox_trace": inboxTrace,
  "0011_inbox_dead_index": inboxDeadIndex,
  "0012_operations": operations,
  "0013_runner_controls": runnerControls,
  "0014_outbox_unpublished_order": outboxUnpublishedOrder,
  "0015_submission_slot_acquire": submissionSlotAcquire,
  "0016_late_attempt_results": lateAttemptResults,
  "0017_token_revocations": tokenRevocations
}

/** The table the Migrator records applied migrations in (migration_id = the number before the name's `_`). */
export const MIGRATIONS_TABLE = "app_migrations"

/** The id of the newest migration this code knows: `/readyz` checks the database has it. */
export const latestMigration = Math.max(...Object.keys(migrations).map((name) => Number(name.split("_")[0])))

const runMigrations = Migrator.make({})({
  loader: Migrator.fromRecord(migrations),
  table: MIGRATIONS_TABLE
})

/**
 * Runs the project's migrations (migrations/) at runner start; idempotent. Runners starting together are
 * serialized by a session advisory lock held on a reserved connection while the Migrator runs. The lock is tried,
 * not waited for: a wait on the server would outlast DB_STATEMENT_TIMEOUT while another runner migrates.
 */
export const migrate = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const conn = yield* sql.reserve
  const lock = conn.executeValues(`SELECT pg_try_advisory_lock(${MIGRATION_LOCK_KEY})`, []).pipe(
    Effect.map((rows) => rows[0]?.[0] === true)
  )
  yield* Effect.acquireRelease(
    Effect.gen(function*() {
      if (yield* lock) return
      yield* Effect.logInfo("another runner is migrating: waiting for it")
      yield* Effect.repeat(lock, { until: (locked) => locked, schedule: Schedule.spaced("200 millis") })
    }),
    () => Effect.ignore(conn.executeRaw(`SELECT pg_advisory_unlock(${MIGRATION_LOCK_KEY})`, []))
  )
  return yield* runMigrations
}).pipe(Effect.scoped)
const MIGRATION_LOCK_KEY = 7_340_001

export const MigrationsLive = Layer.effectDiscard(migrate)

/** Connections dropped because PostgreSQL did not answer a query in time (a silent link). */
const connectionsDropped = Metric.counter("db_connections_dropped", {
  description: "pooled PostgreSQL connections dropped because a query got no answer in time",
  incremental: true
})

/** New connections that went to another host of a multi-host DATABASE_URL than the connection before (a failover). */
export const hostSwitches = Metric.counter("pg_host_switches", {
  description: "new PostgreSQL connections that went to another host of DATABASE_URL than the one before (failover)",
  incremental: true
})

/**
 * PostgreSQL from DATABASE_URL: any number of runners may share it. The pool is bounded at every step (pgPool.ts):
 * while the link is silent a request fails within DB_CONNECT_TIMEOUT or DB_STATEMENT_TIMEOUT + 1 s (503 at the API)
 * instead of hanging, and the connections it hung on are dropped, so fresh ones serve as soon as the link is back.
 * The cluster's storage shares this pool (its SqlClient), so its shard locks and messages are bounded the same way.
 * With several hosts (`postgres://u@h1:5432,h2:5432/db?target_session_attrs=read-write`) each new connection takes
 * the first usable host, the last good one first (pgHostChoice.ts): after a failover the same pool, the cluster's
 * storage and the LISTEN client reach the promoted server.
 */
export const layerPostgres = (options: {
  readonly url: Redacted.Redacted
  readonly maxConnections: number
  readonly applicationName?: string
}) => {
  const applicationName = options.applicationName ?? "task-control-plane"
  let ownListen: ((channel: string) => Stream.Stream<string, SqlError>) | undefined
  let sessions: () => ReadonlyArray<PoolSession> = () => []
  return PgClient.layerFromPool({
    acquire: Effect.gen(function*() {
      const { link } = yield* Effect.orDie(DatabaseSettings.config)
      const runFork = Runtime.runFork(yield* Effect.runtime<never>())
      const onDropped = (waitedMs: number) =>
        runFork(
          Effect.logWarning("database: no answer to a query; its connection is dropped and will be replaced").pipe(
            Effect.annotateLogs({ waited_ms: waitedMs, application: applicationName }),
            Effect.zipRight(Metric.increment(connectionsDropped))
          )
        )
      const dsn = yield* Either.match(parseDsn(Redacted.value(options.url)), {
        onLeft: (message) => Effect.fail(new SqlError({ message: `DATABASE_URL: ${message}` })),
        onRight: Effect.succeed
      })
      const onHostChosen = (
        host: { host: string; port: number },
        previous: { host: string; port: number } | undefined
      ) =>
        runFork(
          Effect.logInfo(`database: connections go to ${formatHost(host)}`).pipe(
            Effect.annotateLogs({
              pg_host: formatHost(host),
              previous_host: previous === undefined ? "none" : formatHost(previous),
              application: applicationName
            }),
            Effect.zipRight(previous === undefined ? Effect.void : Metric.increment(hostSwitches))
          )
        )
      const pool = yield* Effect.acquireRelease(
        Effect.sync(() =>
          makePool({
            dsn,
            onHostChosen,
            maxConnections: options.maxConnections,
            applicationName,
            types,
            link,
            onDropped
          })
        ),
        (pool) => Effect.promise(() => pool.end()).pipe(Effect.interruptible, Effect.timeoutOption("1 second"))
      )
      ownListen = listenOnOwnClient(pool)
      sessions = trackSessions(pool)
      // as PgClient.layer does: a runner that cannot reach its database fails at start, within the bounds
      yield* Effect.tryPromise({
        try: () => pool.query("SELECT 1"),
        catch: (cause) => new SqlError({ cause, message: "PgClient: Failed to connect" })
      })
      return pool
    }),
    applicationName,
    types
  }).pipe(
    // LISTEN in place of sql-pg's (pgListen.ts): it fails when its server goes (a restart, a failover to another
    // host), so the wake loops LISTEN again; sql-pg builds its client with Object.assign the same way
    Layer.tap((context) =>
      Effect.sync(() => {
        if (ownListen !== undefined) Object.assign(Context.get(context, PgClient.PgClient), { listen: ownListen })
      })
    ),
    // the pool's own sessions, for the shard-lock audit (OwnSessions.ts)
    Layer.merge(Layer.succeed(OwnSessions, { sessions: Effect.sync(() => sessions()) }))
  )
}

/** DATABASE_URL decoded at start (pgHosts.ts): a bad host list or target_session_attrs is one line naming it. */
const checkedUrl = (s: S.Setting<Option.Option<Redacted.Redacted>>): S.Setting<Option.Option<Redacted.Redacted>> => ({
  config: Config.mapOrFail(s.config, (url) =>
    Option.match(url, {
      onNone: () => Either.right(url),
      onSome: (value) =>
        Either.match(parseDsn(Redacted.value(value)), {
          onLeft: (message) => Either.left(ConfigError.InvalidData([], `DATABASE_URL: ${message}`)),
          onRight: () => Either.right(url)
        })
    })),
  docs: s.docs
})

const positive = (s: S.Setting<Duration.Duration>) =>
  S.refine(s, "must be longer than 0", (d) => Duration.greaterThan(d, Duration.zero))

export const DatabaseSettings = S.area("Database", "where tasks, events and the cluster's tables live", {
  url: checkedUrl(S.secret(
    "DATABASE_URL",
    "PostgreSQL for any number of runners; unset: the embedded PGlite (one runner). Several hosts as libpq takes " +
      "them: postgres://user@h1:5432,h2:5432/db?target_session_attrs=read-write (any: the first that answers)"
  )),
  poolSize: S.integer("DB_POOL_SIZE", "connections per runner (PostgreSQL only; PGlite takes 2)", 20, { min: 1 }),
  link: S.all({
    connectTimeout: positive(S.duration(
      "DB_CONNECT_TIMEOUT",
      "longest wait to open a connection or to get a free one from the pool; then the request fails (503)",
      "5 seconds"
    )),
    statementTimeout: positive(S.duration(
      "DB_STATEMENT_TIMEOUT",
      "PostgreSQL cancels a statement that runs longer (statement_timeout; migrations too); a query still " +
        "unanswered 1 s later has lost its link: it fails (503) and its connection is dropped and replaced",
      "5 seconds"
    )),
    idleTimeout: positive(S.duration(
      "DB_IDLE_TIMEOUT",
      "an unused pooled connection is closed after this long",
      "10 seconds"
    )),
    keepAlive: positive(S.duration(
      "DB_KEEPALIVE",
      "TCP keepalive: idle time before the first probe, at both ends (the server's tcp_keepalives_idle)",
      "30 seconds"
    ))
  }),
  embeddedDataDir: S.string("EMBEDDED_DATA_DIR", "PGlite data folder when DATABASE_URL is unset", ".data/pglite")
})

/**
 * Whether the database is the embedded PGlite: its pool of 2 leaves no connection for LISTEN (one is the cluster's
 * lock connection), so the wake loops (WakeLoop.ts) do not try it and run on their sweeps. Provided beside the
 * PgClient by `layerEmbedded`; false for any other database.
 */
export class EmbeddedDatabase extends Context.Reference<EmbeddedDatabase>()("EmbeddedDatabase", {
  defaultValue: () => false
}) {}

/**
 * The embedded default: PGlite served over a unix socket in the data folder, so @effect/sql-pg and
 * @effect/cluster use the same code paths as with a real server. PGlite is one PostgreSQL session:
 * advisory locks exclude nothing and more than 2 connections interleave the protocol, so this serves
 * exactly one runner with a pool of 2, and a lock file refuses a second runner on the same data.
 */
export const layerEmbedded = (dataDir: string) =>
  Layer.unwrapScoped(Effect.gen(function*() {
    const dir = path.resolve(dataDir)
    yield* Effect.sync(() => fs.mkdirSync(dir, { recursive: true }))
    yield* acquireRunnerLock(path.join(dir, "runner.lock"))
    const db = yield* Effect.acquireRelease(
      Effect.promise(() => PGlite.create(path.join(dir, "pgdata"))),
      (db) => Effect.promise(() => db.close())
    )
    const socketPath = path.join(dir, ".s.PGSQL.5432")
    yield* Effect.sync(() => fs.rmSync(socketPath, { force: true }))
    const server = new PGLiteSocketServer({ db, path: socketPath, maxConnections: 2 })
    yield* Effect.acquireRelease(
      Effect.promise(() => server.start()),
      () => Effect.promise(() => server.stop())
    )
    // said once here, instead of a LISTEN failing in every wake loop (WakeLoop.ts)
    yield* Effect.logInfo(
      "embedded PostgreSQL (PGlite) serving; no LISTEN/NOTIFY on it (its 2 connections are taken): " +
        "the inbox and the outbox are drained by their sweeps (INBOX_SWEEP_INTERVAL, OUTBOX_SWEEP_INTERVAL)"
    ).pipe(Effect.annotateLogs({ dataDir: dir }))
    return Layer.merge(
      PgClient.layer({
        host: dir,
        port: 5432,
        username: "postgres",
        database: "postgres",
        maxConnections: 2,
        applicationName: "task-control-plane",
        types
      }),
      Layer.succeed(EmbeddedDatabase, true)
    )
  }))

const acquireRunnerLock = (lockPath: string) =>
  Effect.acquireRelease(
    Effect.suspend(() => {
      const holder = readLockHolder(lockPath)
      if (Option.isSome(holder) && holder.value !== process.pid && isAlive(holder.value)) {
        return Effect.dieMessage(
          `embedded database at ${path.dirname(lockPath)} is in use by runner pid ${holder.value}; ` +
            "PGlite serves one runner only: set DATABASE_URL to run more"
        )
      }
      return Effect.sync(() => fs.writeFileSync(lockPath, String(process.pid)))
    }),
    () => Effect.sync(() => fs.rmSync(lockPath, { force: true }))
  )

const readLockHolder = (lockPath: string): Option.Option<number> => {
  try {
    const pid = Number(fs.readFileSync(lockPath, "utf8").trim())
    return Number.isInteger(pid) && pid > 0 ? Option.some(pid) : Option.none()
  } catch {
    return Option.none()
  }
}

const isAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

/** DATABASE_URL when set, else the embedded PGlite in EMBEDDED_DATA_DIR (default .data/pglite). */
export const layerFromEnv = Layer.unwrapEffect(Effect.map(
  DatabaseSettings.config,
  (c): Layer.Layer<Sql, SqlError> =>
    Option.match(c.url, {
      onNone: () => layerEmbedded(c.embeddedDataDir),
      onSome: (url) => layerPostgres({ url, maxConnections: c.poolSize })
    })
))

export type Sql = PgClient.PgClient | SqlClient.SqlClient
