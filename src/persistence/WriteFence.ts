import { SqlClient } from "@effect/sql"
import { Effect, Schedule } from "effect"
import * as S from "../config/Settings.js"
import { allows, type ModeGates, type SystemMode } from "../domain/systemModes.js"
import { WriteFenced } from "../schema/errors.js"

export const FENCE_SCOPE = "global"

export interface FenceToken {
  readonly region: string
  readonly epoch: number
}

/** The fence row as this runner last read it. */
export interface FenceView {
  readonly mode: SystemMode
  readonly activeRegion: string
  readonly writeEpoch: number
  readonly degradedProviders: ReadonlyArray<string>
  readonly updatedAt: Date
}

export const WriteFenceSettings = S.area("Write fence", "which region this runner writes for, under which epoch", {
  region: S.string("REGION", "this runner's region; only the fence's active region writes", "local"),
  epoch: S.optionalInteger(
    "WRITE_EPOCH",
    "pin the write epoch (the runner then never follows a bump: it is fenced after one); unset: follow the fence row"
  ),
  refresh: S.duration(
    "FENCE_REFRESH_INTERVAL",
    "how often a runner re-reads the fence row (mode, active region, write epoch): an operator's change reaches every runner within this",
    "1 second"
  )
})

interface FenceRow {
  readonly mode: SystemMode
  readonly active_region: string
  readonly write_epoch: number
  readonly degraded_providers: ReadonlyArray<string>
  readonly updated_at: Date
}

const viewOf = (r: FenceRow): FenceView => ({
  mode: r.mode,
  activeRegion: r.active_region,
  writeEpoch: r.write_epoch,
  degradedProviders: r.degraded_providers,
  updatedAt: r.updated_at
})

/**
 * This runner's claim to write (seed 19.5.5), following the fence row without a restart (seed 19.4.4's takeover
 * order). Every FENCE_REFRESH_INTERVAL the row is read again:
 * - the active region is this runner's: the runner adopts the row's write epoch (after a bump, the runners of the
 *   new active region carry on under the new epoch);
 * - another region is active: the runner keeps its old epoch, which the fence refuses, so it writes nothing more;
 * - WRITE_EPOCH pins the epoch: such a runner never adopts a bump and is fenced after one.
 * The token is only what a write claims: every task write checks it against the row inside its own transaction
 * (FOR SHARE), so a write that took the old epoch before a bump and commits after it is refused, and a bump waits
 * for the writes in flight.
 */
export class WriteFence extends Effect.Service<WriteFence>()("WriteFence", {
  scoped: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const { epoch: pinned, refresh: every, region } = yield* WriteFenceSettings.config
    yield* sql`
      INSERT INTO region_write_fence (resource_scope, active_region, write_epoch, mode)
      VALUES (${FENCE_SCOPE}, ${region}, 1, 'NORMAL')
      ON CONFLICT (resource_scope) DO NOTHING`
    const read = sql<FenceRow>`
      SELECT mode, active_region, write_epoch, degraded_providers, updated_at FROM region_write_fence
      WHERE resource_scope = ${FENCE_SCOPE}`.pipe(Effect.map((rows) => viewOf(rows[0]!)))

    let view = yield* read
    let token: FenceToken = { region, epoch: pinned._tag === "Some" ? pinned.value : view.writeEpoch }
    if (view.activeRegion !== region) {
      yield* Effect.logWarning("this runner's region is not the active region: its task writes will be fenced")
        .pipe(Effect.annotateLogs({ region, active_region: view.activeRegion }))
    }

    /** Takes a freshly read row: adopts its epoch where this region is active, says what changed. */
    const follow = (next: FenceView) =>
      Effect.gen(function*() {
        const before = view
        view = next
        if (next.mode !== before.mode) {
          yield* Effect.logInfo(`system mode ${before.mode} -> ${next.mode}`)
        }
        if (pinned._tag === "Some") {
          if (next.writeEpoch !== before.writeEpoch && next.writeEpoch !== token.epoch) {
            yield* Effect.logWarning("the write epoch moved past this runner's pinned WRITE_EPOCH: it is fenced")
              .pipe(Effect.annotateLogs({ pinned: token.epoch, write_epoch: next.writeEpoch }))
          }
          return
        }
        if (next.activeRegion === region) {
          if (next.writeEpoch !== token.epoch) {
            yield* Effect.logInfo(`adopting write epoch ${next.writeEpoch} (was ${token.epoch})`)
            token = { region, epoch: next.writeEpoch }
          }
        } else if (before.activeRegion === region) {
          yield* Effect.logWarning(`region ${next.activeRegion} is now active: this runner (${region}) stops writing`)
        }
      })

    const refresh = Effect.flatMap(read, follow).pipe(Effect.withSpan("WriteFence.refresh"))
    yield* refresh.pipe(
      Effect.catchAllCause((cause) => Effect.logDebug("fence row not read; keeping the last one", cause)),
      Effect.repeat(Schedule.spaced(every)),
      Effect.forkScoped
    )

    /**
     * Inside an admitting transaction: this runner's region and epoch are the active ones and the mode admits new
     * work, else WriteFenced naming the mode; the token it checked is the one the transaction writes under. The fence row is held FOR SHARE until the transaction ends, so a bump
     * or a mode change waits for it.
     */
    const admitting = (provider?: string) =>
      Effect.gen(function*() {
        const rows = yield* sql<FenceRow>`
          SELECT mode, active_region, write_epoch, degraded_providers, updated_at FROM region_write_fence
          WHERE resource_scope = ${FENCE_SCOPE}
          FOR SHARE`
        const f = rows[0]
        const t = token
        if (!f || f.active_region !== t.region || f.write_epoch !== t.epoch) {
          return yield* new WriteFenced({
            reason: `this runner (region ${t.region}, epoch ${t.epoch}) is not the active writer`,
            mode: f?.mode ?? null
          })
        }
        if (!allows(f.mode, "admission", f.degraded_providers, provider)) {
          return yield* new WriteFenced({ reason: `admissions are paused: mode ${f.mode}`, mode: f.mode })
        }
        return t
      })

    return {
      /** The claim a write carries now (read it at each write, never keep it). */
      current: (): FenceToken => token,
      /** The fence row as last read (at most FENCE_REFRESH_INTERVAL old). */
      view: (): FenceView => view,
      mode: Effect.sync(() => view.mode),
      /** Whether the current mode lets `gate` run (for `provider`, where the gate is per provider). */
      allows: (gate: keyof ModeGates, provider?: string) =>
        Effect.sync(() => allows(view.mode, gate, view.degradedProviders, provider)),
      /** Re-reads the row now (after this runner changed it, so that it acts on the change at once). */
      refresh,
      admitting
    } as const
  }).pipe(Effect.orDie)
}) {}
