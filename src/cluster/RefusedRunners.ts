import { RunnerStorage, ShardingConfig } from "@effect/cluster"
import type { RunnerAddress } from "@effect/cluster/RunnerAddress"
import { Effect, Layer, Metric, Option } from "effect"
import * as net from "node:net"
import { addressOf } from "./RunnerControls.js"

/**
 * A runner whose socket port refuses connections is gone: its shards move at the next assignment refresh
 * (REFRESH_ASSIGNMENTS_INTERVAL), not after its heartbeat expires (SHARD_LOCK_EXPIRATION) or the library's health
 * check gives up on it (a ping retried 5 times 500 ms apart, from whichever runner hosts that singleton).
 *
 * Measured with bench:handoff: a kill -9'd runner's last task answered on the survivor after 3.7–5.1 s before this.
 *
 * Only a refusal counts. A refusal means nothing listens on that port: the process is dead (or not yet listening).
 * A runner whose event loop stalls still accepts connections (the kernel queues them), and a machine that vanished
 * times out: neither is judged here, the heartbeat and the library's ping decide those as before. The verdict is
 * this runner's own view of the list (nothing is written): if a refused runner still held its shard locks, the
 * advisory locks keep anyone else from taking its shards, as for any disagreement between views.
 */
const PROBE_TIMEOUT_MS = 500

const refusedRunners = Metric.counter("cluster_runners_refused_total", {
  description: "runners found refusing connections at their runner port (dead): their shards move at once",
  incremental: true
})

/** true when nothing listens at the address (ECONNREFUSED); false when it answers, times out, or fails otherwise. */
export const refuses = (address: RunnerAddress, timeoutMs = PROBE_TIMEOUT_MS): Effect.Effect<boolean> =>
  Effect.async<boolean>((resume) => {
    const socket = net.connect({ host: address.host, port: address.port })
    const done = (refused: boolean) => {
      socket.destroy()
      resume(Effect.succeed(refused))
    }
    socket.setTimeout(timeoutMs, () => done(false))
    socket.once("connect", () => done(false))
    socket.once("error", (e: NodeJS.ErrnoException) => done(e.code === "ECONNREFUSED"))
    return Effect.sync(() => socket.destroy())
  })

/** The RunnerStorage below, whose runner list marks refusing runners unhealthy (this runner is never probed). */
export const layerRefusedRunners = Layer.effect(
  RunnerStorage.RunnerStorage,
  Effect.gen(function*() {
    const inner = yield* RunnerStorage.RunnerStorage
    const config = yield* ShardingConfig.ShardingConfig
    const self = Option.map(config.runnerAddress, addressOf)
    let refusing = new Set<string>()

    const getRunners = Effect.gen(function*() {
      const runners = yield* inner.getRunners
      const verdicts = yield* Effect.forEach(
        runners,
        ([runner, healthy]) =>
          healthy && !Option.contains(self, addressOf(runner.address))
            ? refuses(runner.address)
            : Effect.succeed(false),
        { concurrency: "unbounded" }
      )
      const now = new Set<string>()
      for (let i = 0; i < runners.length; i++) {
        if (!verdicts[i]) continue
        const address = addressOf(runners[i]![0].address)
        now.add(address)
        if (!refusing.has(address)) {
          yield* Metric.increment(refusedRunners)
          yield* Effect.logWarning("runner refuses connections: taken as gone, its shards move now").pipe(
            Effect.annotateLogs({ runner: address })
          )
        }
      }
      refusing = now
      return runners.map(([runner, healthy], i) => [runner, healthy && !verdicts[i]] as const)
    })

    return RunnerStorage.RunnerStorage.of({ ...inner, getRunners })
  })
)
