import { ClusterError, Runner, RunnerStorage, ShardingConfig } from "@effect/cluster"
import type { RunnerAddress } from "@effect/cluster/RunnerAddress"
import { SqlClient } from "@effect/sql"
import { Effect, Layer, Metric, Option, Ref } from "effect"
import { heldBack, type Listed, overlay, type RunnerControl } from "./runnerOverlay.js"

export const addressOf = (a: RunnerAddress): string => `${a.host}:${a.port}`

/** What the last refresh of this runner's shard assignment saw: the runner list and the controls over it. */
export interface Observed {
  readonly listed: ReadonlyArray<Listed>
  readonly controls: ReadonlyMap<string, RunnerControl>
  readonly suspended: boolean
}

const drainingGauge = Metric.gauge("cluster_runner_draining", {
  description: "1 while this runner is drained (by an operator, or weight 0): it owns no shards"
})
const weightGauge = Metric.gauge("cluster_runner_weight", {
  description: "this runner's shard weight as the cluster uses it (an operator's, else RUNNER_WEIGHT)"
})
export const controlChanges = Metric.counter("cluster_runner_control_changes_total", {
  description: "drains, undrains and weight changes made through the admin API",
  incremental: true
})

/**
 * Operators' decisions about runners (runner_controls: drain, weight), and what this runner's shard assignment last
 * saw of them. The decisions outlive a restart of the runner they name: a runner drained before maintenance comes
 * back drained, until an operator undrains it.
 */
export class RunnerControls extends Effect.Service<RunnerControls>()("RunnerControls", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const observed = yield* Ref.make<Observed>({ listed: [], controls: new Map(), suspended: false })
    const selfDraining = yield* Ref.make(false)
    return {
      read: sql<{ address: string; draining: boolean; weight: number | null }>`
        SELECT address, draining, weight FROM runner_controls`.pipe(
        Effect.map((rows) =>
          new Map<string, RunnerControl>(rows.map((r) => [r.address, { draining: r.draining, weight: r.weight }]))
        )
      ),
      setDraining: (address: string, draining: boolean, operator: string) =>
        sql`
          INSERT INTO runner_controls (address, draining, updated_by) VALUES (${address}, ${draining}, ${operator})
          ON CONFLICT (address) DO UPDATE
          SET draining = EXCLUDED.draining, updated_at = now(), updated_by = EXCLUDED.updated_by`.pipe(
          Effect.zipRight(Metric.increment(Metric.tagged(controlChanges, "action", draining ? "drain" : "undrain"))),
          Effect.zipRight(Effect.logInfo(`runner ${draining ? "drained" : "undrained"}`)),
          Effect.annotateLogs({ runner: address, operator })
        ),
      setWeight: (address: string, weight: number, operator: string) =>
        sql`
          INSERT INTO runner_controls (address, weight, updated_by) VALUES (${address}, ${weight}, ${operator})
          ON CONFLICT (address) DO UPDATE
          SET weight = EXCLUDED.weight, updated_at = now(), updated_by = EXCLUDED.updated_by`.pipe(
          Effect.zipRight(Metric.increment(Metric.tagged(controlChanges, "action", "weight"))),
          Effect.zipRight(Effect.logInfo("runner weight set")),
          Effect.annotateLogs({ runner: address, operator, weight })
        ),
      /** The runner list and controls as of the last assignment refresh (at most REFRESH_ASSIGNMENTS_INTERVAL old). */
      observed: Ref.get(observed),
      /** Called by the storage below on every refresh. */
      observe: (o: Observed) => Ref.set(observed, o),
      /** Whether this runner is drained now, as its own assignment sees it. */
      selfDraining: Ref.get(selfDraining),
      setSelfDraining: (draining: boolean) => Ref.getAndSet(selfDraining, draining)
    }
  })
}) {}

/**
 * The cluster's RunnerStorage (SqlRunnerStorage) with the operators' controls laid over the runner list it hands to
 * the shard assignment (runnerOverlay.ts says how and why). Everything else passes through.
 */
export const layerRunnerStorage = Layer.effect(
  RunnerStorage.RunnerStorage,
  Effect.gen(function*() {
    const inner = yield* RunnerStorage.RunnerStorage
    const controls = yield* RunnerControls
    const config = yield* ShardingConfig.ShardingConfig
    const self = Option.getOrUndefined(
      Option.map(config.runnerAddress, (a) => ({ address: addressOf(a), weight: config.runnerShardWeight }))
    )
    let previous: ReadonlyMap<string, number> = new Map()
    let wasSuspended = false

    const getRunners = Effect.gen(function*() {
      const [stored, ctl] = yield* Effect.all([inner.getRunners, ClusterError.PersistenceError.refail(controls.read)])
      const byAddress = new Map(stored.map(([r]) => [addressOf(r.address), r]))
      const listed = stored.map(([r, healthy]) => ({
        address: addressOf(r.address),
        registeredWeight: r.weight,
        healthy
      }))
      const result = overlay(listed, ctl, self, previous)
      previous = result.listed
      yield* controls.observe({ listed, controls: ctl, suspended: result.suspended })
      if (result.suspended !== wasSuspended) {
        wasSuspended = result.suspended
        yield* result.suspended
          ? Effect.logWarning("every healthy runner is drained: the drains wait until one is undrained or joins")
          : Effect.logInfo("a runner can own shards again: drains apply")
      }
      if (self !== undefined) {
        const draining = heldBack(ctl.get(self.address)) && !result.suspended
        if ((yield* controls.setSelfDraining(draining)) !== draining) {
          yield* Effect.logInfo(draining ? "this runner is drained: its shards move away" : "this runner takes shards")
        }
        yield* Metric.set(drainingGauge, draining ? 1 : 0)
        yield* Metric.set(weightGauge, previous.get(self.address) ?? self.weight)
      }
      return result.runners.map((o) => {
        const r = byAddress.get(o.address)!
        return [Runner.make({ address: r.address, groups: r.groups, weight: o.weight }), o.healthy] as const
      })
    })

    return RunnerStorage.RunnerStorage.of({ ...inner, getRunners })
  })
)
