import { Context, type Effect } from "effect"
import type { PoolSession } from "./pgPool.js"

/**
 * This process's own PostgreSQL sessions: its pool's open connections, each with its backend pid, whether it is lent
 * and how often it came back to the pool (pgPool.ts `trackSessions`). Provided with a DATABASE_URL pool
 * (Database.layerPostgres); the embedded PGlite has none. The shard-lock audit (src/cluster/ShardLockAudit.ts) reads
 * it to find locks that its own sessions hold.
 */
export class OwnSessions extends Context.Tag("OwnSessions")<OwnSessions, {
  readonly sessions: Effect.Effect<ReadonlyArray<PoolSession>>
}>() {}
