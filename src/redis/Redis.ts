import { Context, Duration, Effect, Layer, Metric, Option, Queue, Redacted } from "effect"
import { Redis as IORedis, type RedisOptions } from "ioredis"
import type * as S from "../config/Settings.js"
import { redisConnections, redisMasterSwitches } from "../observability/metrics.js"
import { describeTarget, RedisSettings, type RedisTarget } from "./RedisSettings.js"

export { RedisSettings, type RedisTarget } from "./RedisSettings.js"

/**
 * The shared Redis connection, if one is configured. Without REDIS_URL or REDIS_SENTINELS (the embedded,
 * single-process default) the client is None and every user falls back to in-process state. Only a connection
 * holder: users define their own scripts and subscriptions on it.
 */
export class Redis extends Context.Tag("Redis")<Redis, {
  readonly client: Option.Option<IORedis>
  readonly keyPrefix: string
}>() {}

const ERROR_LOG_INTERVAL = Duration.seconds(30)
const CONNECT_TIMEOUT_MS = 2_000
const RESTART_DELAY_MS = 1_000

/** What an operator sees of one of this process's Redis connections (GET /admin/redis). */
export interface ConnectionState {
  readonly connection: string
  readonly target: string
  /** ioredis' status: ready, connecting, reconnecting, … */
  readonly status: string
  /** the server it is (or was last) connected to, host:port */
  readonly master: string | null
  readonly connects: number
  readonly masterSwitches: number
}

/** This process's open connections (a registry like the metrics': one per process, read by the admin API). */
const open = new Set<() => ConnectionState>()
export const connectionStates = (): ReadonlyArray<ConnectionState> => [...open].map((state) => state())

/**
 * A connection of the caller's own, closed with the scope: connection errors logged at most once per
 * ERROR_LOG_INTERVAL, every (re)connection counted, a log line when it finds another master than before (a Sentinel
 * failover), and a short wait for the first connection.
 */
const own = (connection: string, target: string, create: () => IORedis) =>
  Effect.gen(function*() {
    // connection events arrive on an event emitter, outside any fiber: the listeners only record them and wake
    // scoped fibers, one logs errors at most once per ERROR_LOG_INTERVAL (Redis down means an error every retry),
    // the other every master switch
    const wake = yield* Queue.sliding<void>(1)
    const switches = yield* Queue.unbounded<{ readonly from: string; readonly to: string }>()
    let lastError: unknown = undefined
    let suppressed = 0
    let master: string | undefined
    let connects = 0
    let masterSwitches = 0
    const connected = Metric.tagged(redisConnections, "connection", connection)
    const switched = Metric.tagged(redisMasterSwitches, "connection", connection)
    let closing = false
    const client = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const client = create()
        // ioredis gives up on a connection only when a connect is aborted or its retry strategy says so (ours never
        // does): a connection that ends without our asking starts again, so that no caller is left without Redis
        client.on("end", () => {
          if (closing) return
          lastError = "the connection ended: reconnecting"
          Queue.unsafeOffer(wake, undefined)
          setTimeout(() => closing || client.connect().catch(() => undefined), RESTART_DELAY_MS)
        })
        client.on("error", (error: unknown) => {
          lastError = error
          suppressed++
          Queue.unsafeOffer(wake, undefined)
        })
        client.on("ready", () => {
          connected.unsafeUpdate(1, [])
          connects++
          const address = `${client.stream?.remoteAddress}:${client.stream?.remotePort}`
          if (master !== undefined && master !== address) {
            switched.unsafeUpdate(1, [])
            masterSwitches++
            Queue.unsafeOffer(switches, { from: master, to: address })
          }
          master = address
        })
        return client
      }),
      (client) =>
        Effect.tryPromise(() => {
          closing = true
          return client.quit()
        }).pipe(
          Effect.timeout(Duration.seconds(1)),
          Effect.ignore,
          Effect.ensuring(Effect.sync(() => client.disconnect()))
        )
    )
    const state = (): ConnectionState => ({
      connection,
      target,
      status: client.status,
      master: master ?? null,
      connects,
      masterSwitches
    })
    yield* Effect.acquireRelease(Effect.sync(() => open.add(state)), () => Effect.sync(() => open.delete(state)))
    const annotations = { redis: target, connection }
    yield* Effect.gen(function*() {
      yield* Queue.take(wake)
      const count = suppressed
      suppressed = 0
      yield* Effect.logWarning("Redis connection error").pipe(
        Effect.annotateLogs({ ...annotations, error: String(lastError), errors_since_last_log: count })
      )
      yield* Effect.sleep(ERROR_LOG_INTERVAL)
    }).pipe(Effect.forever, Effect.forkScoped)
    yield* Queue.take(switches).pipe(
      Effect.flatMap(({ from, to }) =>
        Effect.logWarning(`Redis master switched: ${from} → ${to}`).pipe(
          Effect.annotateLogs({ ...annotations, from, to })
        )
      ),
      Effect.forever,
      Effect.forkScoped
    )
    // a booting runner waits (briefly) for its first connection rather than starting on the local fallbacks;
    // an unreachable Redis answers with an error at once or after connectTimeout, and then it carries on
    yield* Effect.async<void>((resume) => {
      if (client.status === "ready") return resume(Effect.void)
      const done = () => {
        client.off("ready", done)
        client.off("error", done)
        resume(Effect.void)
      }
      client.once("ready", done)
      client.once("error", done)
      return Effect.sync(() => {
        client.off("ready", done)
        client.off("error", done)
      })
    }).pipe(Effect.timeout(Duration.millis(CONNECT_TIMEOUT_MS + 500)), Effect.ignore)
    return client
  })

/** Each client's target as logs show it, so that its duplicates are described the same way. */
const targets = new WeakMap<IORedis, string>()

const options = (target: RedisTarget): RedisOptions => ({
  lazyConnect: false,
  enableOfflineQueue: false, // fail fast when down: callers have a local fallback, a queue only adds delay
  // the commands given in one turn of the event loop go out in one socket write, not one each: every poll asks the
  // breaker and the quota (Lua scripts), and a write per command was 4.7% of a polling runner's CPU (bench:polling's
  // profile: Node's writeUtf8String under ioredis' sendCommand)
  enableAutoPipelining: true,
  maxRetriesPerRequest: 1,
  connectTimeout: CONNECT_TIMEOUT_MS,
  retryStrategy: (times) => Math.min(200 * times, 2_000), // forever, at most 2 s apart
  // a demoted master (a failover the client has not noticed yet) refuses writes with READONLY: the command fails
  // (its caller falls back) and the client reconnects, which asks the Sentinels for the master again
  reconnectOnError: (error) => error.message.startsWith("READONLY"),
  ...(target._tag === "Url" ? {} : {
    sentinels: target.sentinels.map((s) => ({ host: s.host, port: s.port })),
    name: target.masterName,
    role: "master" as const,
    ...Option.match(Option.map(target.password, Redacted.value), {
      onNone: () => ({}),
      onSome: (password) => ({ password })
    }),
    ...Option.match(Option.map(target.sentinelPassword, Redacted.value), {
      onNone: () => ({}),
      onSome: (sentinelPassword) => ({ sentinelPassword })
    }),
    // a silent Sentinel is skipped after this, not waited for
    sentinelCommandTimeout: CONNECT_TIMEOUT_MS,
    sentinelRetryStrategy: (times: number) => Math.min(200 * times, 2_000) // all Sentinels down: forever, ≤ 2 s
    // no `failoverDetector`: a +switch-master that arrives while the client is reconnecting (its master was killed)
    // aborts that connect, and ioredis 5.11 then ends the client for good ("Connection is closed." for ever after:
    // seen in test/integration/sentinel.test.ts). It is not needed either: the Sentinels close the clients of a
    // demoted master (CLIENT KILL), a dead one closes itself, and each reconnect asks the Sentinels again.
  })
})

const connect = (target: RedisTarget) =>
  own("main", describeTarget(target), () => {
    const client = target._tag === "Url" ? new IORedis(target.url, options(target)) : new IORedis(options(target))
    targets.set(client, describeTarget(target))
    return client
  })

/**
 * A second connection with the options of `client` (and `overrides`), e.g. for subscriber mode, in which a
 * connection can run no other command; it follows a Sentinel failover like `client`. `connection` names it in logs
 * and metrics (a small fixed set). Closed when the scope closes.
 */
export const duplicate = (client: IORedis, connection: string, overrides: Partial<RedisOptions> = {}) =>
  own(
    connection,
    targets.get(client) ?? `redis://${client.options.host}:${client.options.port}`,
    () => client.duplicate(overrides)
  )

const make = (target: Option.Option<RedisTarget>, keyPrefix: string) =>
  Effect.map(
    Option.match(target, {
      onNone: () => Effect.succeed(Option.none<IORedis>()),
      onSome: (t) => Effect.asSome(connect(t))
    }),
    (client) => Redis.of({ client, keyPrefix })
  )

/**
 * Redis from REDIS_URL or REDIS_SENTINELS (optional) and REDIS_KEY_PREFIX; the connection is closed when the scope
 * closes.
 */
export const layerFromEnv: Layer.Layer<Redis> = Layer.scoped(
  Redis,
  Effect.gen(function*() {
    const { keyPrefix, target } = yield* RedisSettings.config
    return yield* make(target, keyPrefix)
  }).pipe(Effect.orDie)
)

/** One Redis server at `url`. */
export const layer = (url: string, keyPrefix: string): Layer.Layer<Redis> =>
  Layer.scoped(Redis, make(Option.some({ _tag: "Url", url }), keyPrefix))

/** The master the Sentinels name (`sentinels` as `host:port`), for tests and tools. */
export const layerSentinel = (
  sentinels: ReadonlyArray<S.HostPort>,
  masterName: string,
  keyPrefix: string
): Layer.Layer<Redis> =>
  Layer.scoped(
    Redis,
    make(
      Option.some({
        _tag: "Sentinel",
        sentinels,
        masterName,
        password: Option.none(),
        sentinelPassword: Option.none()
      }),
      keyPrefix
    )
  )
