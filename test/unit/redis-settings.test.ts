import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Option } from "effect"
import * as S from "../../src/config/Settings.js"
import { RedisSettings } from "../../src/redis/Redis.js"

/** What the runner's start check says of these settings: the target they name, or its one `config:` line. */
const read = (env: Record<string, string>) =>
  S.validateAll([RedisSettings]).pipe(
    Effect.zipRight(RedisSettings.config),
    Effect.mapError((e) => typeof e === "string" ? e : S.describe(e)),
    Effect.map((c) => Option.getOrUndefined(c.target)),
    Effect.either,
    Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))
  )

describe("Redis settings: one server or Sentinels", () => {
  it.effect("REDIS_SENTINELS is a host:port list, with the master's name", () =>
    Effect.gen(function*() {
      const target = yield* read({ REDIS_SENTINELS: " 10.0.0.1:26379, [::1]:26380 ,", REDIS_MASTER_NAME: "tcp" })
      expect(target._tag === "Right" && target.right).toMatchObject({
        _tag: "Sentinel",
        sentinels: [{ host: "10.0.0.1", port: 26379 }, { host: "::1", port: 26380 }],
        masterName: "tcp"
      })
      expect(yield* read({ REDIS_URL: "redis://127.0.0.1:6379", REDIS_SENTINELS: "" })).toMatchObject({
        right: { _tag: "Url", url: "redis://127.0.0.1:6379" }
      })
      expect(yield* read({})).toMatchObject({ _tag: "Right", right: undefined })
    }))

  it.effect("bad values and combinations are one line naming the variable", () =>
    Effect.gen(function*() {
      const refused = (env: Record<string, string>) => Effect.map(read(env), (r) => r._tag === "Left" && r.left)
      expect(yield* refused({ REDIS_SENTINELS: "10.0.0.1:26379,10.0.0.2" })).toBe(
        "REDIS_SENTINELS: entry 2: expected host:port, got \"10.0.0.2\""
      )
      expect(yield* refused({ REDIS_SENTINELS: "10.0.0.1:0" })).toMatch(
        /^REDIS_SENTINELS: entry 1: .*between 1 and 65535/
      )
      expect(yield* refused({ REDIS_URL: "redis://10.0.0.1:6379", REDIS_SENTINELS: "10.0.0.1:26379" })).toBe(
        "REDIS_URL and REDIS_SENTINELS are both set: set REDIS_URL for one Redis server, or REDIS_SENTINELS (with " +
          "REDIS_MASTER_NAME) for Sentinel, not both"
      )
      expect(yield* refused({ REDIS_URL: "redis://10.0.0.1:6379", REDIS_SENTINEL_PASSWORD: "x" })).toBe(
        "REDIS_SENTINEL_PASSWORD: only used with REDIS_SENTINELS (a REDIS_URL carries its own password)"
      )
    }))
})
