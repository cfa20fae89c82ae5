import { Command } from "@effect/cli"
import { Console, Effect } from "effect"
import type { RedisStatusView } from "../../http/admin/RedisApi.js"
import { AdminClient } from "./AdminClient.js"
import { table } from "./clusterCommands.js"

export const redisLines = (s: RedisStatusView): string => {
  const head = s.mode === "none"
    ? "no shared Redis (in-process quotas and bus)"
    : s.mode === "url"
    ? `Redis ${s.target}`
    : `Redis ${s.target}\nthe Sentinels name ${s.sentinel_master ?? "NO MASTER (no Sentinel answered)"}` +
      (s.sentinel_answered_by === null ? "" : ` (asked ${s.sentinel_answered_by})`)
  const stale = (master: string | null) =>
    s.mode === "sentinel" && s.sentinel_master !== null && master !== s.sentinel_master ? "  <- not on it yet" : ""
  return `${head}\n` + table(
    ["CONNECTION", "STATUS", "MASTER", "CONNECTS", "SWITCHES"],
    s.connections.map((c) => [
      c.connection,
      c.status,
      (c.master ?? "-") + stale(c.master),
      String(c.connects),
      String(c.master_switches)
    ])
  )
}

const status = Command.make("status", {}, () =>
  Effect.gen(function*() {
    const client = yield* AdminClient
    yield* Console.log(redisLines(yield* client.redis.status()))
  })).pipe(
    Command.withDescription(
      "the answering runner's Redis connections and the master the Sentinels name now (after a failover, every " +
        "connection should be on it)"
    )
  )

export const redisCommands = [
  Command.make("redis").pipe(Command.withDescription("Redis and Sentinel"), Command.withSubcommands([status]))
]
