import pg from "pg"
import type * as Pg from "pg"
import { formatHost, type PgDsn, type PgHost } from "./pgHosts.js"

/**
 * The host choice behind a DATABASE_URL with several hosts, in plain Node like the pool it serves (pgPool.ts): each
 * new connection tries the hosts in order, as libpq does, the last good one first so that a steady pool does not probe
 * the others; a host that refuses, times out, or (with target_session_attrs=read-write) answers with a read-only
 * session is left for the next. A failover (the primary stopped, a replica promoted) costs the pool's connections to
 * the old primary, which fail and are replaced by connections to the new one, with the same pool.
 */
export class HostChoice {
  private last: PgHost | undefined

  constructor(
    readonly dsn: PgDsn,
    /** A connection went to `host`; `previous` is the host of the one before (undefined for the first). */
    private readonly onChosen: (host: PgHost, previous: PgHost | undefined) => void
  ) {}

  /** The last good host, else the first listed. */
  get current(): PgHost {
    return this.last ?? this.dsn.hosts[0]!
  }

  /** The hosts to try for a new connection: the last good one first, then the others as listed. */
  order(): ReadonlyArray<PgHost> {
    const last = this.last
    return last === undefined ? this.dsn.hosts : [last, ...this.dsn.hosts.filter((h) => h !== last)]
  }

  chosen(host: PgHost) {
    if (host === this.last) return
    const previous = this.last
    this.last = host
    this.onChosen(host, previous)
  }
}

/** A session that is read-only (a standby) where target_session_attrs=read-write wants a writable one. */
class ReadOnlySession extends Error {}

// pg's client state, which a retry on another host starts again from (pg's own names; pg 8.x)
interface ClientState {
  connection: Pg.Connection
  connectionTimeoutHandle: ReturnType<typeof setTimeout> | undefined
  _connecting: boolean
  _connected: boolean
  _connectionError: boolean
  _ending: boolean
  _ended: boolean
  _queryable: boolean
  _activeQuery: unknown
  _queryQueue: Array<unknown>
  _sentQueryQueue: Array<unknown>
  _txStatus: unknown
  readyForQuery: boolean
  processID: number | null
  secretKey: number | null
}

/**
 * A pg client (subclass of `Base`) that connects to the first usable host of `choice`. pg's Client connects once
 * only, so a failed try gets a fresh Connection and pg's connect state reset on the same client object (the pool
 * holds the object). The connection left behind is detached first, so its late events reach nobody.
 */
export const hostChoosingClient = <B extends typeof pg.Client>(Base: B, choice: HostChoice): B =>
  class HostChoosingClient extends (Base as typeof pg.Client) {
    private readonly connectionConfig: Pg.ClientConfig

    constructor(config: Pg.ClientConfig = {}) {
      super(config)
      this.connectionConfig = config
    }

    // pg's overloads: a promise without a callback, nothing with one
    override connect(callback?: (err: Error) => void): any {
      const connected = this.connectToOne()
      if (callback === undefined) return connected
      connected.then(() => (callback as (err: Error | null, client: unknown) => void)(null, this), callback)
    }

    private async connectToOne(): Promise<void> {
      // a connection lost during the session check is emitted as 'error' on the client, before the pool listens to
      // it (after connect): it fails the check here instead of ending the process
      const duringConnect = () => {}
      this.on("error", duringConnect)
      try {
        await this.tryHosts()
      } finally {
        this.off("error", duringConnect)
      }
    }

    private async tryHosts(): Promise<void> {
      const failures: Array<string> = []
      let lastError: unknown
      for (const [i, host] of choice.order().entries()) {
        if (i > 0) this.renew()
        this.host = host.host
        this.port = host.port
        try {
          await new Promise<void>((resolve, reject) => super.connect((e) => (e ? reject(e) : resolve())))
          if (choice.dsn.targetSessionAttrs === "read-write") {
            const r = await this.query("SHOW transaction_read_only")
            if (r.rows[0]?.transaction_read_only !== "off") throw new ReadOnlySession("read-only session")
          }
          choice.chosen(host)
          return
        } catch (e) {
          lastError = e
          failures.push(`${formatHost(host)}: ${e instanceof Error ? e.message : String(e)}`)
          this.detach()
        }
      }
      throw new Error(`no usable PostgreSQL host (${failures.join("; ")})`, { cause: lastError })
    }

    /** The current connection, ended and detached from this client. */
    private detach() {
      const state = this as unknown as ClientState
      clearTimeout(state.connectionTimeoutHandle)
      const old = state.connection
      old.removeAllListeners()
      old.on("error", () => {})
      ;(old as unknown as { stream: { destroy: () => void } }).stream.destroy()
    }

    /** A fresh Connection and pg's connect state as a new client has it. */
    private renew() {
      const state = this as unknown as ClientState
      const c = this.connectionConfig
      state.connection = new pg.Connection({
        ...(c.stream === undefined ? {} : { stream: c.stream }),
        ssl: (this as unknown as { connectionParameters: { ssl: Pg.ClientConfig["ssl"] } }).connectionParameters.ssl,
        keepAlive: c.keepAlive ?? false,
        keepAliveInitialDelayMillis: c.keepAliveInitialDelayMillis ?? 0,
        ...({ encoding: "utf8" } as object)
      } as Pg.ConnectionConfig)
      state.connectionTimeoutHandle = undefined
      state._connecting = false
      state._connected = false
      state._connectionError = false
      state._ending = false
      state._ended = false
      state._queryable = true
      state._activeQuery = null
      state._queryQueue = []
      state._sentQueryQueue = []
      state._txStatus = null
      state.readyForQuery = false
      state.processID = null
      state.secretKey = null
    }
  } as unknown as B
