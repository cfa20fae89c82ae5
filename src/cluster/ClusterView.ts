import { ShardingConfig } from "@effect/cluster"
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { LastRunner, RunnerNotFound } from "../schema/clusterErrors.js"
import { RunnerControls } from "./RunnerControls.js"
import { effectiveWeight, heldBack, overlay, type RunnerControl } from "./runnerOverlay.js"
import { allShards, STALE_AFTER_MS } from "./RunnerReports.js"

export interface RunnerStatus {
  readonly address: string
  readonly healthy: boolean
  readonly draining: boolean
  readonly weight: number
  readonly shards: number
  readonly entities: number | null
  readonly singletons: ReadonlyArray<string>
}

interface Report {
  readonly address: string
  readonly shards: ReadonlyArray<string>
  readonly entities: number
  readonly singletons: ReadonlyArray<string>
  readonly age_ms: number
}

/**
 * The cluster as an operator sees it, from any runner: the runners this runner's last assignment refresh saw, the
 * operators' controls over them, and what each runner last reported holding (RunnerReports.ts). A shard claimed by
 * two reports (one runner released it, the other took it, and the first has not reported since) goes to the newer
 * report; a shard nobody fresh claims is moving (runner null).
 */
export class ClusterView extends Effect.Service<ClusterView>()("ClusterView", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const controls = yield* RunnerControls
    const config = yield* ShardingConfig.ShardingConfig
    const shards = allShards(config)

    const reports = sql<Report>`
      SELECT address, shards, entities, singletons,
        (extract(epoch FROM now() - reported_at) * 1000)::float8 AS age_ms
      FROM runner_reports`

    /** Shard id (`group:id`) → runner address, from the fresh reports of live runners. */
    const holders = (live: ReadonlySet<string>, all: ReadonlyArray<Report>) => {
      const owner = new Map<string, { address: string; age: number }>()
      for (const r of all) {
        if (!live.has(r.address) || r.age_ms > STALE_AFTER_MS) continue
        for (const s of r.shards) {
          const current = owner.get(s)
          if (current === undefined || r.age_ms < current.age) owner.set(s, { address: r.address, age: r.age_ms })
        }
      }
      return owner
    }

    const snapshot = Effect.gen(function*() {
      const observed = yield* controls.observed
      const all = yield* reports
      const live = new Set(observed.listed.map((r) => r.address))
      return { observed, all, owner: holders(live, all) }
    })

    const status = Effect.map(snapshot, ({ all, observed, owner }) => {
      const counts = new Map<string, number>()
      for (const { address } of owner.values()) counts.set(address, (counts.get(address) ?? 0) + 1)
      const runners: Array<RunnerStatus> = observed.listed.map((r) => {
        const control = observed.controls.get(r.address)
        const report = all.find((x) => x.address === r.address && x.age_ms <= STALE_AFTER_MS)
        return {
          address: r.address,
          healthy: r.healthy,
          draining: control?.draining ?? false,
          weight: control?.weight ?? effectiveWeight(r.registeredWeight, control),
          shards: counts.get(r.address) ?? 0,
          entities: report?.entities ?? null,
          singletons: report?.singletons ?? []
        }
      })
      return {
        runners: runners.sort((a, b) => a.address.localeCompare(b.address)),
        shards_per_group: config.shardsPerGroup,
        groups: [...config.availableShardGroups]
      }
    })

    const shardMap = Effect.map(snapshot, ({ owner }) => ({
      shards: shards.map((s) => ({ group: s.group, id: s.id, runner: owner.get(s.toString())?.address ?? null }))
    }))

    /** Checks the runner is live and that the change leaves some runner able to own shards; then applies it. */
    const live = (address: string) =>
      Effect.flatMap(
        controls.observed,
        (o) => o.listed.some((r) => r.address === address) ? Effect.succeed(o) : new RunnerNotFound({ address })
      )
    const change = (address: string, next: (c: RunnerControl) => RunnerControl) =>
      Effect.gen(function*() {
        const { listed } = yield* live(address)
        // the stored controls, not the last refresh's: a drain made a moment ago counts
        const proposed = new Map(yield* controls.read)
        proposed.set(address, next(proposed.get(address) ?? { draining: false, weight: null }))
        if (heldBack(proposed.get(address)) && overlay(listed, proposed, undefined, new Map()).suspended) {
          return yield* new LastRunner({ address })
        }
      })

    return {
      status,
      shards: shardMap,
      drain: (address: string, operator: string) =>
        change(address, (c) => ({ ...c, draining: true })).pipe(
          Effect.zipRight(controls.setDraining(address, true, operator))
        ),
      undrain: (address: string, operator: string) =>
        live(address).pipe(
          Effect.zipRight(controls.setDraining(address, false, operator))
        ),
      setWeight: (address: string, weight: number, operator: string) =>
        change(address, (c) => ({ ...c, weight })).pipe(
          Effect.zipRight(controls.setWeight(address, weight, operator))
        )
    }
  })
}) {}
