import { ClusterMetrics, EntityId, ShardId, Sharding, ShardingConfig } from "@effect/cluster"
import { SqlClient } from "@effect/sql"
import { Clock, Duration, Effect, Layer, Option, Schedule } from "effect"
import { addressOf } from "./RunnerControls.js"

/**
 * The cluster singletons, by the names given to `Singleton.make` (Sweeper.ts, Reconcilers.ts, OutboxRelay.ts,
 * EventRetention.ts) and the one @effect/cluster registers itself (Sharding.ts). A singleton runs on the runner that
 * holds the shard its name hashes to, so who runs it follows from the shard map.
 */
export const SINGLETONS = [
  "TaskSweeper",
  "TaskReconcilers",
  "OutboxRelay",
  "EventRetention",
  "effect/cluster/Sharding/RunnerHealth"
] as const

// A report is written when what the runner holds changes (looked at every 500 ms: a drain's progress shows within
// that), and at least every 2 s otherwise; a report older than 6 s is stale (its runner stalled or died).
const LOOK_EVERY = Duration.millis(500)
const REWRITE_AFTER_MS = 2_000
export const STALE_AFTER_MS = 6_000

export interface Holding {
  readonly shards: ReadonlyArray<string>
  readonly entities: number
  readonly singletons: ReadonlyArray<string>
}

/** Every shard of the cluster, as @effect/cluster names them (`group:id`). */
export const allShards = (config: ShardingConfig.ShardingConfig["Type"]): ReadonlyArray<ShardId.ShardId> =>
  config.availableShardGroups.flatMap((group) =>
    Array.from({ length: config.shardsPerGroup }, (_, i) => ShardId.make(group, i + 1))
  )

/** The shard a singleton named `name` runs on. */
export const singletonShard = (sharding: Sharding.Sharding["Type"], name: string, group = "default"): ShardId.ShardId =>
  sharding.getShardId(EntityId.make(name), group)

/**
 * Each runner writes what it holds (shards whose locks it has, its entity count, its singletons) into
 * runner_reports, so that any runner's admin API can show the whole cluster: a runner knows only its own shards
 * (Sharding.hasShardId), and the library keeps no shard map in storage (its locks are advisory locks).
 */
export const RunnerReportsLive = Layer.scopedDiscard(Effect.gen(function*() {
  const sharding = yield* Sharding.Sharding
  const config = yield* ShardingConfig.ShardingConfig
  const sql = yield* SqlClient.SqlClient
  if (Option.isNone(config.runnerAddress)) return
  const address = addressOf(config.runnerAddress.value)
  const shards = allShards(config)
  const singletons = SINGLETONS.map((name) => ({ name, shard: singletonShard(sharding, name) }))
  let last = ""
  let writtenAt = 0

  const look = Effect.gen(function*() {
    const held = shards.filter((s) => sharding.hasShardId(s)).map((s) => s.toString())
    // @effect/cluster sets its shards gauge when it acquires shards, never when it releases some (Sharding.ts, 0.60.2):
    // a runner that gave half its shards away kept reporting them all (the Prometheus test saw 450 of 300). Corrected
    // here from what the runner actually holds.
    ClusterMetrics.shards.unsafeUpdate(BigInt(held.length), [])
    const running = singletons.filter((s) => sharding.hasShardId(s.shard)).map((s) => s.name)
    const entities = yield* sharding.activeEntityCount
    const now = yield* Clock.currentTimeMillis
    const key = `${held.join(",")}|${entities}|${running.join(",")}`
    if (key === last && now - writtenAt < REWRITE_AFTER_MS) return
    yield* sql`
      INSERT INTO runner_reports (address, shards, entities, singletons, reported_at)
      VALUES (${address}, ${held}, ${entities}, ${running}, now())
      ON CONFLICT (address) DO UPDATE SET shards = EXCLUDED.shards, entities = EXCLUDED.entities,
        singletons = EXCLUDED.singletons, reported_at = EXCLUDED.reported_at`
    last = key
    writtenAt = now
  })

  yield* look.pipe(
    Effect.catchAllCause((cause) => Effect.logDebug("runner report not written; next look tries again", cause)),
    Effect.repeat(Schedule.spaced(LOOK_EVERY)),
    Effect.forkScoped
  )
}))
