import { Config, ConfigError, Context, Duration, Effect, Either, Layer, Metric, Option, Queue, Redacted } from "effect"
import { Redis as IORedis, type RedisOptions } from "ioredis"
import * as S from "../config/Settings.js"
import { redisConnections, redisMasterSwitches } from "../observability/metrics.js"

const settings = S.area("Redis", "the shared Redis of quotas and the notification bus", {
  url: S.secret(
    "REDIS_URL",
    "Redis shared by all runners (quotas, notification bus); unset or empty: in-process quotas and bus (one runner)"
  ),
  sentinels: S.hostPorts(
    "REDIS_SENTINELS",
    "Redis Sentinels (`host:port,…`) that name the current master of REDIS_MASTER_NAME, instead of REDIS_URL: every " +
      "connection follows a failover to the new master"
  ),
  masterName: S.string("REDIS_MASTER_NAME", "the master's name at the Sentinels (with REDIS_SENTINELS)", "mymaster"),
  password: S.secret("REDIS_PASSWORD", "password of the master and replicas (with REDIS_SENTINELS; a URL has its own)"),
  sentinelPassword: S.secret("REDIS_SENTINEL_PASSWORD", "password of the Sentinels (with REDIS_SENTINELS)"),
  keyPrefix: S.string("REDIS_KEY_PREFIX", "prefix of every key and channel, so deployments can share a Redis", "tcp:")
})

/** Where Redis is: one server, or the master the Sentinels name. */
export type RedisTarget =
  | { readonly _tag: "Url"; readonly url: string }
  | {
    readonly _tag: "Sentinel"
    readonly sentinels: ReadonlyArray<S.HostPort>
    readonly masterName: string
    readonly password: Option.Option<Redacted.Redacted>
    readonly sentinelPassword: Option.Option<Redacted.Redacted>
  }

const nonEmpty = (secret: Option.Option<Redacted.Redacted>) =>
  Option.filter(Option.map(secret, Redacted.value), (s) => s.trim().length > 0)

/**
 * The settings and the target they name (None: no shared Redis). One server and Sentinels at once is refused with
 * one line, and so are the Sentinel passwords without Sentinels (they would be ignored silently).
 */
export const RedisSettings: S.Area<S.AreaOf<typeof settings> & { readonly target: Option.Option<RedisTarget> }> = {
  ...settings,
  config: settings.config.pipe(Config.mapOrFail((c) => {
    const url = nonEmpty(c.url)
    const invalid = (message: string) => Either.left(ConfigError.InvalidData([], message))
    if (c.sentinels.length > 0) {
      if (Option.isSome(url)) {
        return invalid(
          "REDIS_URL and REDIS_SENTINELS are both set: set REDIS_URL for one Redis server, or REDIS_SENTINELS " +
            "(with REDIS_MASTER_NAME) for Sentinel, not both"
        )
      }
      const target: RedisTarget = {
        _tag: "Sentinel",
        sentinels: c.sentinels,
        masterName: c.masterName,
        password: c.password,
        sentinelPassword: c.sentinelPassword
      }
      return Either.right({ ...c, target: Option.some(target) })
    }
    for (const [name, value] of [["REDIS_PASSWORD", c.password], ["REDIS_SENTINEL_PASSWORD", c.sentinelPassword]]) {
      if (Option.isSome(value as Option.Option<unknown>)) {
        return invalid(`${name}: only used with REDIS_SENTINELS (a REDIS_URL carries its own password)`)
      }
    }
    return Either.right({
      ...c,
      target: Option.map(url, (u): RedisTarget => ({ _tag: "Url", url: u }))
    })
  }))
}

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

/** The URL without its password, for logs. */
const safeUrl = (url: string) => {
  try {
    const u = new URL(url)
    u.password = ""
    return u.toString()
  } catch {
    return "<unparsable REDIS_URL>"
  }
}

/** The target for logs, without passwords. */
const describeTarget = (target: RedisTarget) =>
  target._tag === "Url"
    ? safeUrl(target.url)
    : `sentinel master ${target.masterName} via ${target.sentinels.map((s) => `${s.host}:${s.port}`).join(",")}`

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
          const address = `${client.stream?.remoteAddress}:${client.stream?.remotePort}`
          if (master !== undefined && master !== address) {
            switched.unsafeUpdate(1, [])
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
