import { ShardId, Sharding, ShardingConfig } from "@effect/cluster"
import { SqlClient } from "@effect/sql"
import { Clock, Duration, Effect, Layer, Metric, Option, Schedule } from "effect"
import { OwnSessions } from "../persistence/OwnSessions.js"

/**
 * Shard locks that this process holds but serves no shard for, taken back.
 *
 * @effect/cluster (SqlRunnerStorage) holds its shard locks as PostgreSQL advisory locks on one reserved connection,
 * and takes that connection back after a lock operation fails or outlasts its interval. The old connection's finalizer
 * unlocks everything, but under a timeout, and failures are ignored: when the unlock is cut off (a loaded runner, a
 * connection busy with the query that timed out), the connection goes back to the pool still holding its locks. It is
 * then an ordinary pooled connection, lent again and again, and every shard whose lock it holds is served by no runner:
 * the other runners cannot lock it, and this one's new lock connection cannot either. The soak saw it once, after a
 * runner restart beside a PostgreSQL restart: 150 of 300 shards held by a runner that served none, 37 tasks stuck.
 *
 * So every AUDIT_EVERY this runner lists the shard locks its own sessions hold (OwnSessions: its pool's backend
 * pids). A session whose shard locks are all of shards this runner does not serve, and has been so for twice the
 * lock expiration, is ended with `pg_terminate_backend`: its locks go with it, and the shards are assigned as usual.
 * Twice, so that a release the library is still working through (its entities stopping) is not cut short: a handoff
 * takes seconds.
 * The cluster's lock connection holds the locks of the shards it serves, so it is never such a session while it
 * serves any; a lock connection whose release of every shard is stuck that long is ended too (the library would keep
 * re-locking them on every refresh), as a lock would lapse.
 *
 * Lock numbers follow SqlRunnerStorage (@effect/cluster 0.60): the i-th shard group in sorted order (from 0), shard n
 * (from 1), is the advisory lock (i + 1) * 1,000,000 + n, taken as a bigint key (classid 0, objsubid 1).
 */
const LOCK_GROUP_BASE = 1_000_000

export const orphanedLocks = Metric.counter("shard_locks_orphaned_total", {
  description: "shard locks this runner's own PostgreSQL sessions held for shards it did not serve, for at least " +
    "twice the lock expiration, freed by ending the session that held them",
  incremental: true
})
const unservedLocks = Metric.gauge("shard_locks_unserved", {
  description: "shard locks held by this runner's own sessions at the last audit, of shards it does not serve"
})

export interface HeldLock {
  readonly pid: number
  readonly shard: ShardId.ShardId
}

/** The shard an advisory lock number stands for, if it is one of the cluster's. */
export const shardOfLock = (
  lockNumber: number,
  groups: ReadonlyArray<string>,
  shardsPerGroup: number
): Option.Option<ShardId.ShardId> => {
  const group = groups[Math.floor(lockNumber / LOCK_GROUP_BASE) - 1]
  const shard = lockNumber % LOCK_GROUP_BASE
  return group === undefined || shard < 1 || shard > shardsPerGroup
    ? Option.none()
    : Option.some(ShardId.make(group, shard))
}

/** The sessions whose every shard lock is of a shard not served here, with those shards. */
export const unservedSessions = (
  held: ReadonlyArray<HeldLock>,
  served: (shard: ShardId.ShardId) => boolean
): Map<number, ReadonlyArray<ShardId.ShardId>> => {
  const bySession = new Map<number, Array<ShardId.ShardId>>()
  const servingSessions = new Set<number>()
  for (const { pid, shard } of held) {
    if (served(shard)) servingSessions.add(pid)
    else bySession.set(pid, [...(bySession.get(pid) ?? []), shard])
  }
  for (const pid of servingSessions) bySession.delete(pid)
  return bySession
}

const audit = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const sharding = yield* Sharding.Sharding
  const config = yield* ShardingConfig.ShardingConfig
  const own = yield* OwnSessions
  const groups = Array.from(ShardingConfig.shardGroupConfig(config).available)
  const patience = 2 * Duration.toMillis(Duration.decode(config.shardLockExpiration))
  /** Sessions found holding only unserved shard locks, since when (epoch ms). */
  let suspects = new Map<number, number>()

  const heldLocks = (pids: ReadonlyArray<number>) =>
    sql<{ pid: number; objid: string }>`
      SELECT pid, objid::int8 AS objid FROM pg_locks
      WHERE locktype = 'advisory' AND granted AND classid = 0 AND objsubid = 1 AND pid IN ${sql.in(pids)}
    `.pipe(
      Effect.map((rows) =>
        rows.flatMap((r): Array<HeldLock> =>
          Option.match(shardOfLock(Number(r.objid), groups, config.shardsPerGroup), {
            onNone: () => [],
            onSome: (shard) => [{ pid: Number(r.pid), shard }]
          })
        )
      )
    )

  const end = (pid: number, shards: ReadonlyArray<ShardId.ShardId>, heldForMs: number) =>
    Effect.gen(function*() {
      const [row] = yield* sql<{ ended: boolean }>`SELECT pg_terminate_backend(${pid}) AS ended`
      yield* Effect.logError(
        "shard locks held by a session of this runner that serves none of their shards: the session is ended, " +
          "so that their shards are assigned again"
      ).pipe(Effect.annotateLogs({
        pg_pid: pid,
        shards: shards.map(String).join(" "),
        held_for_ms: heldForMs,
        ended: row?.ended ?? false
      }))
      yield* Metric.incrementBy(orphanedLocks, shards.length)
    }).pipe(Effect.withSpan("ShardLockAudit.end", { attributes: { pg_pid: pid, shards: shards.length } }))

  return Effect.gen(function*() {
    const pids = yield* own.pids
    if (pids.length === 0) return
    const held = yield* heldLocks(pids)
    const unserved = unservedSessions(held, (shard) => sharding.hasShardId(shard))
    yield* Metric.set(unservedLocks, Array.from(unserved.values()).reduce((n, shards) => n + shards.length, 0))
    const now = yield* Clock.currentTimeMillis
    const next = new Map<number, number>()
    for (const [pid, shards] of unserved) {
      const since = suspects.get(pid) ?? now
      if (now - since >= patience) yield* end(pid, shards, now - since)
      else next.set(pid, since)
    }
    suspects = next
  }).pipe(
    // a failed audit (the database gone for a moment) decides nothing: the next one looks again
    Effect.catchAllCause((cause) => Effect.logDebug("shard-lock audit failed", cause))
  )
})

/** The audit's period: a third of the lock expiration, as the cluster's own lock refresh. */
const auditEvery = (config: ShardingConfig.ShardingConfig["Type"]) =>
  Duration.divide(Duration.decode(config.shardLockExpiration), 3).pipe(Option.getOrElse(() => Duration.seconds(5)))

/**
 * The audit, in a process that hosts shards on a PostgreSQL pool (OwnSessions) with advisory shard locks; nothing
 * otherwise (the embedded PGlite, or SHARD_LOCK_DISABLE_ADVISORY's lock table, whose rows lapse).
 */
export const ShardLockAuditLive = Layer.scopedDiscard(Effect.gen(function*() {
  const config = yield* ShardingConfig.ShardingConfig
  const own = yield* Effect.serviceOption(OwnSessions)
  if (Option.isNone(own) || config.shardLockDisableAdvisory || Option.isNone(config.runnerAddress)) return
  const once = yield* audit.pipe(Effect.provideService(OwnSessions, own.value))
  yield* once.pipe(
    Effect.repeat(Schedule.spaced(auditEvery(config))),
    Effect.forkScoped
  )
}))
