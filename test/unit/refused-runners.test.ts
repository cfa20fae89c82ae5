import { Runner, RunnerAddress, RunnerStorage, ShardingConfig } from "@effect/cluster"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Option } from "effect"
import * as net from "node:net"
import { layerRefusedRunners, refuses } from "../../src/cluster/RefusedRunners.js"

/** A port something listens on (a live runner), closed with the scope. */
const listening = Effect.acquireRelease(
  Effect.async<net.Server>((resume) => {
    const server = net.createServer((socket) => socket.destroy()).listen(
      0,
      "127.0.0.1",
      () => resume(Effect.succeed(server))
    )
  }),
  (server) => Effect.async<void>((resume) => void server.close(() => resume(Effect.void)))
).pipe(Effect.map((server) => (server.address() as net.AddressInfo).port))

/** A port nothing listens on any more (a killed runner's). */
const closed = Effect.scoped(listening)

const runnerAt = (port: number) =>
  Runner.make({ address: RunnerAddress.make("127.0.0.1", port), groups: ["default"], weight: 1 })

/** The layer over a stored runner list, as the shard assignment reads it. */
const listed = (self: number, stored: ReadonlyArray<readonly [Runner.Runner, boolean]>) =>
  Effect.flatMap(RunnerStorage.RunnerStorage, (s) => s.getRunners).pipe(
    Effect.provide(layerRefusedRunners.pipe(
      Layer.provide(Layer.succeed(
        RunnerStorage.RunnerStorage,
        RunnerStorage.RunnerStorage.of({ getRunners: Effect.succeed(stored.map(([r, h]) => [r, h])) } as never)
      )),
      Layer.provide(ShardingConfig.layer({ runnerAddress: Option.some(RunnerAddress.make("127.0.0.1", self)) }))
    )),
    Effect.map((runners) => runners.map(([r, healthy]) => `${r.address.port}:${healthy}`))
  )

describe("a runner refusing connections is taken as gone", () => {
  it.scoped("refused: nothing listens; a listening port is not refused", () =>
    Effect.gen(function*() {
      const live = yield* listening
      const dead = yield* closed
      expect(yield* refuses(RunnerAddress.make("127.0.0.1", dead))).toBe(true)
      expect(yield* refuses(RunnerAddress.make("127.0.0.1", live))).toBe(false)
    }))

  it.scoped("the runner list marks a refusing runner unhealthy, keeps live ones and never probes itself", () =>
    Effect.gen(function*() {
      const live = yield* listening
      const dead = yield* closed
      // this runner's own port refuses too (it is not listening in this test): it stays healthy
      const self = yield* closed
      const stored = [[runnerAt(live), true], [runnerAt(dead), true], [runnerAt(self), true]] as const
      expect(yield* listed(self, stored)).toEqual([`${live}:true`, `${dead}:false`, `${self}:true`])
    }))

  it.scoped("a runner stored unhealthy stays unhealthy; nothing is marked healthy here", () =>
    Effect.gen(function*() {
      const live = yield* listening
      expect(yield* listed(1, [[runnerAt(live), false]])).toEqual([`${live}:false`])
    }))
})
