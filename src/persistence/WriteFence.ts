import { SqlClient } from "@effect/sql"
import { Duration, Effect } from "effect"
import * as S from "../config/Settings.js"
import { WriteFenced } from "../schema/errors.js"

export const FENCE_SCOPE = "global"

/** Modes in which new work (tasks, projects) may be admitted (seed 19.5.5); the others keep existing tasks moving only. */
const ADMITTING_MODES = ["NORMAL", "DEGRADED_NOTIFY", "DEGRADED_PROVIDER", "QUEUE_ONLY"]

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
    /**
     * Inside an admitting transaction: this runner's region and epoch are the active ones and the mode admits new
     * work, else WriteFenced. The fence row is held FOR SHARE until the transaction ends, so a bump waits for it.
     */
    const admitting = Effect.gen(function*() {
      const fence = yield* sql<{ active_region: string; write_epoch: number; mode: string }>`
        SELECT active_region, write_epoch, mode FROM region_write_fence WHERE resource_scope = ${FENCE_SCOPE}
        FOR SHARE`
      const f = fence[0]
      if (!f || f.active_region !== token.region || f.write_epoch !== token.epoch) {
        return yield* new WriteFenced({ reason: "this runner's region or epoch is not active" })
      }
      if (!ADMITTING_MODES.includes(f.mode)) {
        return yield* new WriteFenced({ reason: `admissions are paused (mode ${f.mode})` })
      }
    })
    return { token, mode, admitting } as const
  }).pipe(Effect.orDie)
}) {}
