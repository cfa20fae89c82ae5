import { Effect, Option } from "effect"
import { isLoopbackHost } from "../config/loopback.js"
import * as S from "../config/Settings.js"
import { AuthSettings } from "../http/Auth.js"
import { DatabaseSettings } from "../persistence/Database.js"
import { QueueSettings } from "../queue/RocketMQQueue.js"
import { RedisSettings } from "../redis/Redis.js"
import { formatRoles, rolesProblem, type Services } from "./Roles.js"
import { RunnerSettings } from "./RunnerConfig.js"

/**
 * Without AUTH_SECRET the runner signs tokens with a development secret that is written in this repository, and hands
 * a development session to whoever asks (POST /v1/dev/session): right for `npm start` on one machine, never on a
 * network. So without a secret it listens on loopback only and says so; told to listen on any other address, it
 * refuses to start (a `config:` line naming AUTH_SECRET, before any database work or bound port).
 */
export const checkListener: Effect.Effect<void, string> = Effect.gen(function*() {
  const { httpHost } = yield* RunnerSettings.config
  const { secret } = yield* AuthSettings.config
  if (Option.isSome(secret)) return
  if (!isLoopbackHost(httpHost)) {
    return yield* Effect.fail(`AUTH_SECRET: must be set when HTTP_HOST (${httpHost}) is not a loopback address`)
  }
  yield* Effect.logWarning(
    "AUTH_SECRET is unset: development mode (development token secret and sessions), listening on loopback only"
  ).pipe(Effect.annotateLogs({ http_host: httpHost }))
}).pipe(Effect.catchTag("ConfigError", (e) => Effect.fail(S.describe(e))))

const nonEmpty = (value: Option.Option<string>) => Option.isSome(value) && value.value.trim().length > 0

/** Which shared services the environment configures (each one's own setting decides it the same way). */
export const servicesFromEnv = Effect.gen(function*() {
  const database = yield* DatabaseSettings.config
  const redis = yield* RedisSettings.config
  const queue = yield* QueueSettings.config
  return {
    database: Option.isSome(database.url),
    redis: Option.isSome(redis.target),
    rocketmq: nonEmpty(queue.endpoints)
  } satisfies Services
})

/**
 * RUNNER_ROLES against the services configured (Roles.ts `rolesProblem`): an impossible combination is a `config:`
 * line naming RUNNER_ROLES, before anything starts; a possible one answers the line that logs it, for main.ts to log
 * once every check has passed (a refusal by a later check stays the only line).
 */
export const checkRoles: Effect.Effect<Effect.Effect<void>, string> = Effect.gen(function*() {
  const { roles } = yield* RunnerSettings.config
  const problem = rolesProblem(roles, yield* servicesFromEnv)
  if (Option.isSome(problem)) return yield* Effect.fail(`RUNNER_ROLES: ${problem.value}`)
  return Effect.logInfo(
    roles.has("entities")
      ? `roles: ${formatRoles(roles)}`
      : `roles: ${formatRoles(roles)} (a cluster client: hosts no shards)`
  ).pipe(Effect.annotateLogs({ roles: formatRoles(roles) }))
}).pipe(Effect.catchTag("ConfigError", (e) => Effect.fail(S.describe(e))))
