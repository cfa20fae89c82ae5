import { Context, Duration, Effect, Layer, Option, Queue, Redacted } from "effect"
import { Redis as IORedis, type RedisOptions } from "ioredis"
import * as S from "../config/Settings.js"

export const RedisSettings = S.area("Redis", "the shared Redis of quotas and the notification bus", {
  url: S.secret(
    "REDIS_URL",
    "Redis shared by all runners (quotas, notification bus); unset or empty: in-process quotas and bus (one runner)"
  ),
  keyPrefix: S.string("REDIS_KEY_PREFIX", "prefix of every key and channel, so deployments can share a Redis", "tcp:")
})

/**
 * The shared Redis connection, if one is configured. Without REDIS_URL (the embedded, single-process default)
 * the client is None and every user falls back to in-process state. Only a connection holder: users define their
 * own scripts and subscriptions on it.
 */
export class Redis extends Context.Tag("Redis")<Redis, {
  readonly client: Option.Option<IORedis>
  readonly keyPrefix: string
}>() {}

const ERROR_LOG_INTERVAL = Duration.seconds(30)
const CONNECT_TIMEOUT_MS = 2_000

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

/**
 * A connection of the caller's own, closed with the scope: connection errors logged at most once per
 * ERROR_LOG_INTERVAL, and a short wait for the first connection.
 */
const own = (label: string, create: () => IORedis) =>
  Effect.gen(function*() {
    // connection errors arrive on an event emitter, outside any fiber: the listener only records them and wakes
    // a scoped fiber, which logs at most once per ERROR_LOG_INTERVAL (Redis down means an error every retry)
    const wake = yield* Queue.sliding<void>(1)
    let lastError: unknown = undefined
    let suppressed = 0
    const client = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const client = create()
        client.on("error", (error: unknown) => {
          lastError = error
          suppressed++
          Queue.unsafeOffer(wake, undefined)
        })
        return client
      }),
      (client) =>
        Effect.tryPromise(() => client.quit()).pipe(
          Effect.timeout(Duration.seconds(1)),
          Effect.ignore,
          Effect.ensuring(Effect.sync(() => client.disconnect()))
        )
    )
    yield* Effect.gen(function*() {
      yield* Queue.take(wake)
      const count = suppressed
      suppressed = 0
      yield* Effect.logWarning("Redis connection error").pipe(
        Effect.annotateLogs({ redis: label, error: String(lastError), errors_since_last_log: count })
      )
      yield* Effect.sleep(ERROR_LOG_INTERVAL)
    }).pipe(Effect.forever, Effect.forkScoped)
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

const connect = (url: string) =>
  own(safeUrl(url), () =>
    new IORedis(url, {
      lazyConnect: false,
      enableOfflineQueue: false, // fail fast when down: callers have a local fallback, a queue only adds delay
      maxRetriesPerRequest: 1,
      connectTimeout: CONNECT_TIMEOUT_MS,
      retryStrategy: (times) => Math.min(200 * times, 2_000) // forever, at most 2 s apart
    }))

/**
 * A second connection with the options of `client` (and `overrides`), e.g. for subscriber mode, in which a
 * connection can run no other command; closed when the scope closes.
 */
export const duplicate = (client: IORedis, overrides: Partial<RedisOptions> = {}) =>
  own(`redis://${client.options.host}:${client.options.port}`, () => client.duplicate(overrides))

const make = (url: Option.Option<string>, keyPrefix: string) =>
  Effect.map(
    Option.match(url, {
      onNone: () => Effect.succeed(Option.none<IORedis>()),
      onSome: (u) => Effect.asSome(connect(u))
    }),
    (client) => Redis.of({ client, keyPrefix })
  )

/** Redis from REDIS_URL (optional) and REDIS_KEY_PREFIX; the connection is closed when the scope closes. */
export const layerFromEnv: Layer.Layer<Redis> = Layer.scoped(
  Redis,
  Effect.gen(function*() {
    const { keyPrefix, url } = yield* RedisSettings.config
    return yield* make(Option.filter(Option.map(url, Redacted.value), (u) => u.length > 0), keyPrefix)
  }).pipe(Effect.orDie)
)

export const layer = (url: string, keyPrefix: string): Layer.Layer<Redis> =>
  Layer.scoped(Redis, make(Option.some(url), keyPrefix))
