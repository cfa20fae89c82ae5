/**
 * The in-process runner of bench:transitions and bench:entity-stop: one runner holding every shard (no lifecycle unless
 * asked for, the in-process queue) on a PostgreSQL database, with an entity whose handler does nothing beside the task entities (the
 * cluster's own share of any figure).
 */
import { Entity } from "@effect/cluster"
import { Rpc } from "@effect/rpc"
import { Effect, Layer, Redacted, Schema } from "effect"
import { layerPostgres } from "../src/persistence/Database.js"
import { layerPropagationMemory } from "../src/propagation/Propagation.js"
import { layerLifecycle, layerRunnerWith, layerStores } from "../src/runners/Runner.js"
import { RunnerConfig } from "../src/runners/RunnerConfig.js"
import { layerLifecycleDisabled } from "../src/testing/TestRunner.js"

/** An entity whose handler does nothing: what a message costs in the cluster alone. */
export const Echo = Entity.make("BenchEcho", [
  Rpc.make("Ping", { payload: { n: Schema.Number }, success: Schema.Number })
])
const EchoLive = Echo.toLayer(Effect.succeed({ Ping: ({ payload }) => Effect.succeed(payload.n + 1) }))

/**
 * The runner's layers (task entities and Echo) on the database at `url`, its pool of `pool` connections; with
 * `lifecycle`, the runner's own task lifecycle (else none: the entities only commit what they are sent); `echo: false`
 * leaves Echo out (a cluster client, RUNNER_ROLES without entities, hosts no entity); `propagation: false` leaves the
 * outbox relay and the dispatcher out (the outbox only grows: what a write costs without its propagation).
 */
export const inProcessRunner = (
  url: string,
  pool: number,
  options: { readonly lifecycle?: boolean; readonly echo?: boolean; readonly propagation?: boolean } = {}
) =>
  Effect.map(RunnerConfig, (c) => {
    const database = layerPostgres({ url: Redacted.make(url), maxConnections: pool, applicationName: "bench" })
    const runner = layerRunnerWith(
      c,
      options.lifecycle === true ? layerLifecycle : layerLifecycleDisabled,
      options.propagation === false ? Layer.empty : layerPropagationMemory
    )
    const served = options.echo === false ? runner : Layer.merge(runner, EchoLive.pipe(Layer.provide(runner)))
    return served.pipe(Layer.provideMerge(layerStores(database)))
  })
