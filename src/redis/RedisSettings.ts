import { Config, ConfigError, Either, Option, Redacted } from "effect"
import * as S from "../config/Settings.js"

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
export const describeTarget = (target: RedisTarget) =>
  target._tag === "Url"
    ? safeUrl(target.url)
    : `sentinel master ${target.masterName} via ${target.sentinels.map((s) => `${s.host}:${s.port}`).join(",")}`
