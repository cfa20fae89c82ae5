import { ShardId, Sharding, ShardingConfig } from "@effect/cluster"
import { SqlClient } from "@effect/sql"
import type { Connection as SqlConnection } from "@effect/sql/SqlConnection"
import { Clock, Duration, Effect, Layer, Metric, Option, Schedule } from "effect"
import { OwnSessions } from "../persistence/OwnSessions.js"
import type { PoolSession } from "../persistence/pgPool.js"

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
 * So every third of the lock expiration this runner lists the shard locks its own sessions hold (OwnSessions: its
 * pool's connections). A session is freed when every shard lock it holds is of a shard this runner does not serve,
 * that has lasted the lock expiration, and the pool lends it: it is idle in the pool, or came back to it since it was
 * first suspected. The session is ended with `pg_terminate_backend` (its locks go with it), or, when it is the audit's
 * own connection, its locks are unlocked there; the shards are then assigned as usual.
 *
 * The cluster's own lock connection is never freed: it stays lent from its reservation to its end, even while it holds
 * only shards being released. The library keeps those locks until the shards' entities have stopped, so that no other
 * runner starts them meanwhile. A release stuck there for good is not healed here.
 *
 * Lock numbers follow SqlRunnerStorage (@effect/cluster 0.60): the i-th shard group in sorted order (from 0), shard n
 * (from 1), is the advisory lock (i + 1) * 1,000,000 + n, taken as a bigint key (classid 0, objsubid 1).
 */
const LOCK_GROUP_BASE = 1_000_000

export const orphanedLocks = Metric.counter("cluster_shard_locks_orphaned_total", {
  description: "shard locks a pooled session of this runner held for shards it did not serve, for at least the lock " +
    "expiration, freed (the session ended, or its locks unlocked)",
  incremental: true
})
const unservedLocks = Metric.gauge("cluster_shard_locks_unserved", {
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
    else if (bySession.has(pid)) bySession.get(pid)!.push(shard)
    else bySession.set(pid, [shard])
  }
  for (const pid of servingSessions) bySession.delete(pid)
  return bySession
}

/** A suspect: since when (epoch ms) it held only unserved shard locks, and how often it had come back to the pool. */
interface Suspect {
  readonly since: number
  readonly releases: number
}

/**
 * Whether a suspect is a session the pool lends, not the cluster's lock connection: idle in the pool now, or back in
 * it at least once since it was first suspected. The lock connection stays lent from its reservation to its end.
 */
export const pooled = (session: PoolSession, suspect: Suspect): boolean =>
  !session.lent || session.releases > suspect.releases

const audit = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const sharding = yield* Sharding.Sharding
  const config = yield* ShardingConfig.ShardingConfig
  const own = yield* OwnSessions
  const groups = Array.from(ShardingConfig.shardGroupConfig(config).available)
  const patience = Duration.toMillis(Duration.decode(config.shardLockExpiration))
  let suspects = new Map<number, Suspect>()

  // on a connection of its own: the pool lends the last connection back first, which may be the very session to free
  const heldLocks = (conn: SqlConnection, pids: ReadonlyArray<number>) =>
    conn.executeValues(
      `SELECT pid, objid::int8 FROM pg_locks
       WHERE locktype = 'advisory' AND granted AND classid = 0 AND objsubid = 1 AND pid = ANY($1::int4[])`,
      [pids]
    ).pipe(
      Effect.map((rows) =>
        rows.flatMap((r): Array<HeldLock> =>
          Option.match(shardOfLock(Number(r[1]), groups, config.shardsPerGroup), {
            onNone: () => [],
            onSome: (shard) => [{ pid: Number(r[0]), shard }]
          })
        )
      )
    )

  /** Frees the session's locks: ends it, or, when it is the audit's own connection, unlocks them there. */
  const free = Effect.fn("ShardLockAudit.free")(
    function*(conn: SqlConnection, pid: number, shards: ReadonlyArray<ShardId.ShardId>, heldMs: number) {
      const [[self]] = (yield* conn.executeValues("SELECT pg_backend_pid()", [])) as Array<Array<number>>
      const how = pid === self ? "unlocked" : "ended"
      const [[done]] = (pid === self
        ? yield* conn.executeValues("SELECT pg_advisory_unlock_all() IS NULL", [])
        : yield* conn.executeValues("SELECT pg_terminate_backend($1)", [pid])) as Array<Array<boolean>>
      yield* Effect.logError(
        "shard locks held by a pooled session of this runner that serves none of their shards: freed, so that " +
          "their shards are assigned again"
      ).pipe(Effect.annotateLogs({ pg_pid: pid, shards: shards.map(String).join(" "), held_ms: heldMs, how, done }))
      if (done === true) yield* Metric.incrementBy(orphanedLocks, shards.length)
    }
  )

  return Effect.scoped(Effect.gen(function*() {
    const sessions = new Map((yield* own.sessions).map((s) => [s.pid, s]))
    if (sessions.size === 0) return
    const conn = yield* sql.reserve
    const unserved = unservedSessions(
      yield* heldLocks(conn, Array.from(sessions.keys())),
      (shard) => sharding.hasShardId(shard)
    )
    yield* Metric.set(unservedLocks, Array.from(unserved.values()).reduce((n, shards) => n + shards.length, 0))
    const now = yield* Clock.currentTimeMillis
    const next = new Map<number, Suspect>()
    for (const [pid, shards] of unserved) {
      const session = sessions.get(pid)
      if (session === undefined) continue
      const suspect = suspects.get(pid) ?? { since: now, releases: session.releases }
      if (now - suspect.since >= patience && pooled(session, suspect)) {
        yield* free(conn, pid, shards, now - suspect.since)
      } else next.set(pid, suspect)
    }
    suspects = next
  })).pipe(
    // a failed audit (the database gone for a moment) decides nothing: the next one looks again
    Effect.catchAllCause((cause) => Effect.logWarning("shard-lock audit failed; the next one looks again", cause))
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
