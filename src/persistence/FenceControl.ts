import { SqlClient } from "@effect/sql"
import { Effect, Metric } from "effect"
import type { SystemMode } from "../domain/systemModes.js"
import { OperatorAudit } from "./OperatorAudit.js"
import { storageUnavailable } from "./storageUnavailable.js"
import { FENCE_SCOPE, type FenceView, WriteFence } from "./WriteFence.js"

const unavailable = storageUnavailable("fence control")

const fenceChanges = Metric.counter("fence_changes_total", {
  description: "operator changes of the system mode, write epoch or active region"
})

interface Row {
  readonly mode: SystemMode
  readonly active_region: string
  readonly write_epoch: number
  readonly degraded_providers: ReadonlyArray<string>
  readonly updated_at: Date
}

const viewOf = (r: Row): FenceView => ({
  mode: r.mode,
  activeRegion: r.active_region,
  writeEpoch: r.write_epoch,
  degradedProviders: r.degraded_providers,
  updatedAt: r.updated_at
})

const describeMode = (mode: string, providers: ReadonlyArray<string>) =>
  providers.length === 0 ? mode : `${mode} (${providers.join(", ")})`

/**
 * An operator's changes of the fence row (seed 19.5.5): the mode (with DEGRADED_PROVIDER's providers) and the write
 * epoch with the active region. Each is one transaction with its audit row; the row lock waits for task writes in
 * flight (they hold it FOR SHARE), so a write either committed before the change or is judged after it. This runner
 * re-reads the row at once; the others within FENCE_REFRESH_INTERVAL.
 */
export class FenceControl extends Effect.Service<FenceControl>()("FenceControl", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const audit = yield* OperatorAudit
    const fence = yield* WriteFence

    const lock = sql<Row>`
      SELECT mode, active_region, write_epoch, degraded_providers, updated_at FROM region_write_fence
      WHERE resource_scope = ${FENCE_SCOPE} FOR UPDATE`.pipe(Effect.map((rows) => rows[0]!))

    const current = sql<Row>`
      SELECT mode, active_region, write_epoch, degraded_providers, updated_at FROM region_write_fence
      WHERE resource_scope = ${FENCE_SCOPE}`.pipe(
      Effect.map((rows) => viewOf(rows[0]!)),
      Effect.catchTag("SqlError", unavailable)
    )

    const setMode = (operator: string, mode: SystemMode, providers: ReadonlyArray<string>, reason: string) =>
      Effect.gen(function*() {
        const before = yield* lock
        const [after] = yield* sql<Row>`
            UPDATE region_write_fence SET mode = ${mode}, -- names are [a-z0-9_-]: no comma inside one
              degraded_providers = string_to_array(${providers.join(",")}, ','),
              updated_at = now()
            WHERE resource_scope = ${FENCE_SCOPE}
            RETURNING mode, active_region, write_epoch, degraded_providers, updated_at`
        yield* audit.record({
          operator,
          what: "mode",
          from: describeMode(before.mode, before.degraded_providers),
          to: describeMode(mode, providers),
          reason
        })
        return viewOf(after!)
      }).pipe(
        sql.withTransaction,
        Effect.catchTag("SqlError", unavailable),
        Effect.tap((v) =>
          Effect.logWarning(`system mode set to ${describeMode(v.mode, v.degradedProviders)}`).pipe(
            Effect.annotateLogs({ operator, reason })
          )
        ),
        Effect.tap(() => Metric.increment(Metric.tagged(fenceChanges, "what", "mode"))),
        Effect.tap(() => Effect.ignore(fence.refresh))
      )

    /**
     * Seed 19.4.4's "raise write_epoch, the old epoch is void": the epoch goes up by one and `region` becomes the
     * active one. Runners of `region` adopt the new epoch within a second; any other region's stop writing.
     */
    const bumpEpoch = (operator: string, region: string, reason: string) =>
      Effect.gen(function*() {
        const before = yield* lock
        const [after] = yield* sql<Row>`
          UPDATE region_write_fence SET write_epoch = write_epoch + 1, active_region = ${region}, updated_at = now()
          WHERE resource_scope = ${FENCE_SCOPE}
          RETURNING mode, active_region, write_epoch, degraded_providers, updated_at`
        yield* audit.record({
          operator,
          what: "epoch",
          subject: region,
          from: `${before.active_region}@${before.write_epoch}`,
          to: `${after!.active_region}@${after!.write_epoch}`,
          reason
        })
        return viewOf(after!)
      }).pipe(
        sql.withTransaction,
        Effect.catchTag("SqlError", unavailable),
        Effect.tap((v) =>
          Effect.logWarning(`write epoch bumped to ${v.writeEpoch}, active region ${v.activeRegion}`).pipe(
            Effect.annotateLogs({ operator, reason })
          )
        ),
        Effect.tap(() => Metric.increment(Metric.tagged(fenceChanges, "what", "epoch"))),
        Effect.tap(() => Effect.ignore(fence.refresh))
      )

    return { current, setMode, bumpEpoch } as const
  }),
  dependencies: [OperatorAudit.Default]
}) {}
