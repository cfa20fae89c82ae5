import { Context, type Effect } from "effect"

/**
 * This process's own PostgreSQL sessions: the backend pids of its pool's open connections (pgPool.ts
 * `trackSessions`). Provided with a DATABASE_URL pool (Database.layerPostgres); the embedded PGlite has none. The
 * shard-lock audit (src/cluster/ShardLockAudit.ts) reads it to find locks that its own sessions hold.
 */
export class OwnSessions extends Context.Tag("OwnSessions")<OwnSessions, {
  readonly pids: Effect.Effect<ReadonlyArray<number>>
}>() {}
