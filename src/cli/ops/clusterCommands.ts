import { Args, Command } from "@effect/cli"
import { Console, Effect } from "effect"
import type { ClusterStatusView, ShardsView } from "../../http/admin/ClusterApi.js"
import { AdminClient } from "./AdminClient.js"

/** Columns padded to their widest cell. */
export const table = (header: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>): string => {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)))
  return [header, ...rows].map((r) => r.map((cell, i) => cell.padEnd(widths[i]!)).join("  ").trimEnd()).join("\n")
}

export const statusTable = (s: ClusterStatusView): string =>
  table(
    ["RUNNER", "HEALTHY", "DRAINING", "WEIGHT", "SHARDS", "ENTITIES", "SINGLETONS"],
    s.runners.map((r) => [
      r.address,
      r.healthy ? "yes" : "NO",
      r.draining ? "yes" : "no",
      String(r.weight),
      String(r.shards),
      r.entities === null ? "?" : String(r.entities),
      r.singletons.join(",") || "-"
    ])
  ) + `\n${s.groups.length} group(s) (${s.groups.join(", ")}) of ${s.shards_per_group} shards`

/** `1-4,7,9-12`: sorted ids as ranges. */
export const ranges = (ids: ReadonlyArray<number>): string => {
  const sorted = [...ids].sort((a, b) => a - b)
  const parts: Array<string> = []
  for (let i = 0; i < sorted.length;) {
    let j = i
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j]! + 1) j++
    parts.push(i === j ? String(sorted[i]) : `${sorted[i]}-${sorted[j]}`)
    i = j + 1
  }
  return parts.join(",")
}

/** One line per runner and group: how many shards it holds, and which (as ranges); unheld shards as `(moving)`. */
export const shardLines = (m: ShardsView): string => {
  const byOwner = new Map<string, Array<number>>()
  for (const s of m.shards) {
    const key = `${s.runner ?? "(moving)"}\t${s.group}`
    const ids = byOwner.get(key) ?? []
    ids.push(s.id)
    byOwner.set(key, ids)
  }
  return table(
    ["RUNNER", "GROUP", "COUNT", "SHARDS"],
    [...byOwner.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([key, ids]) => {
      const [runner, group] = key.split("\t") as [string, string]
      return [runner, group, String(ids.length), ranges(ids)]
    })
  )
}

const address = Args.text({ name: "address" }).pipe(
  Args.withDescription("the runner's host:port, as `cluster status` lists it")
)

const status = Command.make("status", {}, () =>
  Effect.gen(function*() {
    const client = yield* AdminClient
    yield* Console.log(statusTable(yield* client.cluster.status()))
  })).pipe(Command.withDescription("runners with health, drain, weight, shard and entity counts, singletons they run"))

const cluster = Command.make("cluster").pipe(
  Command.withDescription("the cluster's runners"),
  Command.withSubcommands([status])
)

const shards = Command.make("shards", {}, () =>
  Effect.gen(function*() {
    const client = yield* AdminClient
    yield* Console.log(shardLines(yield* client.cluster.shards()))
  })).pipe(Command.withDescription("the shard → runner map: which shards each runner holds, as ranges"))

const drain = Command.make("drain", { address }, ({ address }) =>
  Effect.gen(function*() {
    const client = yield* AdminClient
    yield* client.cluster.drain({ path: { address } })
    yield* Console.log(
      `${address} drained: its shards move to the other runners; it keeps serving HTTP, and stays drained across ` +
        "restarts until undrained (watch: cluster status)"
    )
  })).pipe(Command.withDescription("move every shard off a runner; it keeps running and serving HTTP"))

const undrain = Command.make("undrain", { address }, ({ address }) =>
  Effect.gen(function*() {
    const client = yield* AdminClient
    yield* client.cluster.undrain({ path: { address } })
    yield* Console.log(`${address} undrained: it takes its share of shards back`)
  })).pipe(Command.withDescription("let a drained runner own shards again"))

const weight = Command.make(
  "weight",
  {
    address,
    weight: Args.integer({ name: "weight" }).pipe(Args.withDescription("0 to 1000; 0 takes every shard away"))
  },
  ({ address, weight }) =>
    Effect.gen(function*() {
      const client = yield* AdminClient
      yield* client.cluster.weight({ path: { address }, payload: { weight } })
      yield* Console.log(`${address} weight ${weight}: shards rebalance within a few seconds (watch: shards)`)
    })
).pipe(Command.withDescription("set a runner's share of shards relative to the others (over its RUNNER_WEIGHT)"))

const runner = Command.make("runner").pipe(
  Command.withDescription("drain, undrain or weigh one runner"),
  Command.withSubcommands([drain, undrain, weight])
)

/** The cluster's commands, for src/cli/ops.ts. */
export const clusterCommands = [cluster, shards, runner] as const
