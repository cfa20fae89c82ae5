import { SqlClient } from "@effect/sql"
import { Duration, Effect } from "effect"
import * as S from "../config/Settings.js"

export const FENCE_SCOPE = "global"

export interface FenceToken {
  readonly region: string
  readonly epoch: number
}

export const WriteFenceSettings = S.area("Write fence", "which region this runner writes for, under which epoch", {
  region: S.string("REGION", "this runner's region; only the fence's active region writes", "local"),
  epoch: S.optionalInteger("WRITE_EPOCH", "pin the write epoch; unset: the epoch active when the runner starts")
})

/**
 * This runner's claim to write (seed 19.5.5). The region comes from configuration; the epoch is the one
 * active when the runner started (or WRITE_EPOCH). Every task write checks both, and the current mode, inside
 * its own transaction, so bumping the epoch fences every writer started before the bump.
 */
export class WriteFence extends Effect.Service<WriteFence>()("WriteFence", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const { region, epoch: pinned } = yield* WriteFenceSettings.config
    yield* sql`
      INSERT INTO region_write_fence (resource_scope, active_region, write_epoch, mode)
      VALUES (${FENCE_SCOPE}, ${region}, 1, 'NORMAL')
      ON CONFLICT (resource_scope) DO NOTHING`
    const rows = yield* sql<{ active_region: string; write_epoch: number }>`
      SELECT active_region, write_epoch FROM region_write_fence WHERE resource_scope = ${FENCE_SCOPE}`
    const epoch = pinned._tag === "Some" ? pinned.value : rows[0]!.write_epoch
    if (rows[0]!.active_region !== region) {
      yield* Effect.logWarning("this runner's region is not the active region: its task writes will be fenced")
        .pipe(Effect.annotateLogs({ region, activeRegion: rows[0]!.active_region }))
    }
    const token: FenceToken = { region, epoch }
    /** The system mode (seed 19.5.5), re-read at most once a second: what background work may start now. */
    const mode = yield* Effect.cachedWithTTL(
      sql<{ mode: string }>`SELECT mode FROM region_write_fence WHERE resource_scope = ${FENCE_SCOPE}`.pipe(
        Effect.map((rows) => rows[0]?.mode ?? "MAINTENANCE"),
        Effect.orElseSucceed(() => "MAINTENANCE")
      ),
      Duration.seconds(1)
    )
    return { token, mode } as const
  }).pipe(Effect.orDie)
}) {}
