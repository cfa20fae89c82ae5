import { Duration, Effect, Option, Redacted } from "effect"
import { Redis as IORedis } from "ioredis"
import { type ConnectionState, connectionStates } from "./Redis.js"
import { describeTarget, RedisSettings, type RedisTarget } from "./RedisSettings.js"

/** Where this process's Redis is, what the Sentinels say of it now, and each of its connections. */
export interface RedisStatus {
  readonly mode: "none" | "url" | "sentinel"
  readonly target: string | null
  /** the master the first Sentinel that answered names now (sentinel mode), and that Sentinel */
  readonly sentinels: { readonly master: string | null; readonly answeredBy: string | null } | null
  readonly connections: ReadonlyArray<ConnectionState>
}

const ASK_TIMEOUT = Duration.seconds(2)

/** One Sentinel's answer for the master's address, on a connection of its own that never retries. */
const ask = (target: Extract<RedisTarget, { _tag: "Sentinel" }>, sentinel: { host: string; port: number }) =>
  Effect.acquireUseRelease(
    Effect.sync(() => {
      const password = Option.getOrUndefined(Option.map(target.sentinelPassword, Redacted.value))
      const client = new IORedis({
        host: sentinel.host,
        port: sentinel.port,
        ...(password === undefined ? {} : { password }),
        lazyConnect: true,
        enableOfflineQueue: true,
        maxRetriesPerRequest: 0,
        connectTimeout: Duration.toMillis(ASK_TIMEOUT),
        retryStrategy: () => null
      })
      client.on("error", () => undefined)
      return client
    }),
    (client) =>
      Effect.tryPromise(() => client.call("SENTINEL", "get-master-addr-by-name", target.masterName)).pipe(
        Effect.timeout(ASK_TIMEOUT),
        Effect.flatMap((reply) =>
          Array.isArray(reply) && reply.length === 2 ? Effect.succeed(`${reply[0]}:${reply[1]}`) : Effect.fail("none")
        )
      ),
    (client) => Effect.sync(() => client.disconnect())
  )

/** For GET /admin/redis and `npm run ops -- redis status`: never fails (a silent Sentinel is a null answer). */
export const redisStatus: Effect.Effect<RedisStatus> = Effect.gen(function*() {
  const { target } = yield* RedisSettings.config
  const connections = connectionStates()
  if (Option.isNone(target)) return { mode: "none", target: null, sentinels: null, connections } as const
  const t = target.value
  if (t._tag === "Url") return { mode: "url", target: describeTarget(t), sentinels: null, connections } as const
  const answer = yield* Effect.firstSuccessOf(
    t.sentinels.map((s) => Effect.map(ask(t, s), (master) => ({ master, answeredBy: `${s.host}:${s.port}` })))
  ).pipe(Effect.orElseSucceed(() => ({ master: null, answeredBy: null })))
  return { mode: "sentinel", target: describeTarget(t), sentinels: answer, connections } as const
}).pipe(Effect.orDie)
