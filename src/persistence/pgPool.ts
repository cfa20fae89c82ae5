import { Duration } from "effect"
import pg from "pg"
import type * as Pg from "pg"
import { HostChoice, hostChoosingClient } from "./pgHostChoice.js"
import { isMultiHost, type PgDsn, type PgHost } from "./pgHosts.js"

/**
 * The pg pool under PgClient, in plain Node (pg's own classes; Database.ts wraps it as Effect's PgClient).
 *
 * Why not `PgClient.layer`: it sets no statement or query timeout and no keepalive. With the link to PostgreSQL
 * silent (connections open, nothing coming back: a firewall or a NAT that forgot them), every request waited for an
 * answer that never came — no reply for 35–45 s and more — and the pool lent the same dead connections again after
 * the link returned (no recovery 64 s later). pg's own `query_timeout` does not help alone: it fails the query but
 * keeps the connection, still waiting on the lost reply, and the pool takes it back as healthy.
 */
export interface LinkSettings {
  /** Opening a connection, or waiting for a free one, fails after this. */
  readonly connectTimeout: Duration.Duration
  /** PostgreSQL cancels a statement that runs longer (its connection stays usable). */
  readonly statementTimeout: Duration.Duration
  /** An unused pooled connection is closed after this. */
  readonly idleTimeout: Duration.Duration
  /** TCP keepalive: idle time before the first probe, at both ends. */
  readonly keepAlive: Duration.Duration
}

/**
 * How long past the statement timeout a query may go unanswered before its link is taken for dead: by then the
 * server has answered, with rows or with its cancel, unless nothing reaches us.
 */
const NO_ANSWER_GRACE = Duration.seconds(1)

/** A transaction left idle this long has lost its client; above the outbox relay's publish bound (10 s) inside one. */
const IDLE_IN_TRANSACTION_TIMEOUT = Duration.minutes(1)

/** The server's keepalive probes after the idle time: it frees a vanished client's locks within 30 s more. */
const SERVER_KEEPALIVE_INTERVAL_SECONDS = 10
const SERVER_KEEPALIVE_COUNT = 3

/** Called when a connection is dropped for want of an answer, with how long it waited (ms). */
export type OnDropped = (waitedMs: number) => void

/**
 * A pg client that gives up on its connection when a query goes unanswered: the socket is destroyed, so the query
 * fails at once (a 503 at the API), and the pool never lends the connection again (a destroyed client is not
 * queryable, and the pool removes it on release). Cursors (no single answer) are not watched; nothing here uses them.
 *
 * Queries given to one connection together (the cluster's storage sends its lock statements concurrently on its
 * reserved connection) go to pg one after the other, each once the one before has answered, and each is watched from
 * then: pg queued them itself, but a watch started at the call counted the time spent behind the others (measured:
 * three 2.5 s statements in a row under a 5 s statement timeout lost their connection, the shard locks with it;
 * pg-pool-queue.test.ts shows it on a fake clock). pg 8 also warns about its own queue, which pg 9 removes.
 *
 * A ROLLBACK on a lost connection succeeds: the server rolls the transaction back when the session ends. @effect/sql
 * makes a failed ROLLBACK a defect (`orDie`), so a transaction whose connection was lost answered 500 instead of the
 * 503 its first error means; this holds for the cluster's storage transactions too.
 */
const droppingClient = (noAnswerMs: number, onDropped: OnDropped) =>
  class DroppingClient extends pg.Client {
    /** Settles once every query given so far has answered (or failed): the next one is sent then. */
    private previous: Promise<unknown> = Promise.resolve()

    constructor(config: Pg.ClientConfig = {}) {
      // the client's own watch replaces pg's query_timeout
      super({ ...config, query_timeout: undefined })
    }

    /** pg's own flag, read as pg-pool reads it: false once the connection has failed. */
    private get lost(): boolean {
      return (this as unknown as { _queryable: boolean })._queryable === false
    }

    /** Sends one query to pg now, watched from now; answers its result. */
    private watched(config: unknown, values: unknown): Promise<unknown> {
      return new Promise((resolve, reject) => {
        const started = Date.now()
        const timer = setTimeout(() => {
          onDropped(Date.now() - started)
          this.connection.stream.destroy(new Error(`no answer from PostgreSQL within ${noAnswerMs} ms`))
        }, noAnswerMs)
        const answered = (error: unknown, result: unknown) => {
          clearTimeout(timer)
          if (error) reject(error)
          else resolve(result)
        }
        const query = super.query.bind(this) as (...args: ReadonlyArray<unknown>) => unknown
        if (values === undefined) query(config, answered)
        else query(config, values, answered)
      })
    }

    // pg's overloads answer a promise, the submittable, or nothing (callback form): `any` matches them all
    override query(config: unknown, values?: unknown, callback?: unknown): any {
      if (typeof (config as { submit?: unknown } | null)?.submit === "function") {
        return (super.query.bind(this) as (...args: ReadonlyArray<unknown>) => unknown)(config, values, callback)
      }
      const done = (typeof values === "function" ? values : typeof callback === "function" ? callback : undefined) as
        | ((error: unknown, result?: unknown) => void)
        | undefined
      if (this.lost && done !== undefined && typeof config === "string" && /^\s*ROLLBACK\b/i.test(config)) {
        process.nextTick(() => done(undefined, { command: "ROLLBACK", rowCount: null, rows: [], fields: [] }))
        return
      }
      const args = typeof values === "function" ? undefined : values
      const result = this.previous.then(() => this.watched(config, args))
      this.previous = result.catch(() => undefined)
      if (done === undefined) return result
      // outside the promise chain, as pg calls it: a callback that throws is an uncaught exception, not a rejection
      result.then((r) => process.nextTick(done, null, r), (e) => process.nextTick(done, e))
    }
  }

/**
 * A pool whose connections time out, are watched for answers, and are kept alive at both ends of the link. With
 * several hosts (or target_session_attrs=read-write) each new connection chooses its host (pgHostChoice.ts); the
 * options' URL (the first host's: pg cannot parse a host list) gives only the user, database and parameters. The
 * LISTEN connections are built from the pool's Client and options too (pgListen.ts). One host keeps pg's own path:
 * the URL as given, no probing.
 */
export const makePool = (options: {
  readonly dsn: PgDsn
  /** A connection went to another host than the one before (several hosts only). */
  readonly onHostChosen?: (host: PgHost, previous: PgHost | undefined) => void
  readonly maxConnections: number
  readonly applicationName: string
  readonly types: Pg.CustomTypesConfig
  readonly link: LinkSettings
  readonly onDropped: OnDropped
}): pg.Pool => {
  const { link } = options
  const statementMs = Duration.toMillis(link.statementTimeout)
  const noAnswerMs = statementMs + Duration.toMillis(NO_ANSWER_GRACE)
  const keepAliveSeconds = Math.max(1, Math.round(Duration.toSeconds(link.keepAlive)))
  const { dsn } = options
  const multiHost = isMultiHost(dsn)
  const choice = multiHost ? new HostChoice(dsn, options.onHostChosen ?? (() => {})) : undefined
  const Client = droppingClient(noAnswerMs, options.onDropped)
  const pool = new pg.Pool({
    max: options.maxConnections,
    application_name: options.applicationName,
    types: options.types,
    Client: choice === undefined ? Client : hostChoosingClient(Client, choice),
    connectionTimeoutMillis: Duration.toMillis(link.connectTimeout),
    idleTimeoutMillis: Duration.toMillis(link.idleTimeout),
    keepAlive: true,
    keepAliveInitialDelayMillis: Duration.toMillis(link.keepAlive),
    statement_timeout: statementMs,
    idle_in_transaction_session_timeout: Duration.toMillis(IDLE_IN_TRANSACTION_TIMEOUT),
    // the server's side of keepalive (an `options` in DATABASE_URL takes precedence over these)
    options:
      `-c tcp_keepalives_idle=${keepAliveSeconds} -c tcp_keepalives_interval=${SERVER_KEEPALIVE_INTERVAL_SECONDS}` +
      ` -c tcp_keepalives_count=${SERVER_KEEPALIVE_COUNT}`,
    connectionString: dsn.urlFor(dsn.hosts[0]!)
  })
  // an idle connection that failed (the server ended it): the pool has removed it, the next use opens another
  pool.on("error", () => {})
  return pool
}

/** One of the pool's open connections: its server process, whether it is lent now, and how often it came back. */
export interface PoolSession {
  readonly pid: number
  readonly lent: boolean
  readonly releases: number
}

/**
 * The sessions of `pool`'s open connections, as they are now: lent or idle (the cluster's reserved shard-lock
 * connection among them, lent since it was reserved). pg sets a client's `processID` from the server's key data when
 * it connects; pg-pool says `connect` when a client joins, `acquire` when it is lent, `release` when it comes back
 * and `remove` when it leaves.
 */
export const trackSessions = (pool: pg.Pool): () => ReadonlyArray<PoolSession> => {
  const open = new Map<Pg.PoolClient, { lent: boolean; releases: number }>()
  pool.on("connect", (client) => open.set(client, { lent: false, releases: 0 }))
  pool.on("acquire", (client) => {
    const state = open.get(client)
    if (state !== undefined) state.lent = true
  })
  pool.on("release", (_error: Error | undefined, client: Pg.PoolClient) => {
    const state = open.get(client)
    if (state === undefined) return
    state.lent = false
    state.releases++
  })
  pool.on("remove", (client) => open.delete(client))
  return () => {
    const sessions: Array<PoolSession> = []
    for (const [client, state] of open) {
      const pid = (client as { readonly processID?: unknown }).processID
      if (typeof pid === "number") sessions.push({ pid, lent: state.lent, releases: state.releases })
    }
    return sessions
  }
}
