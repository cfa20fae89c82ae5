import { ConfigProvider, Effect, Layer, Logger, LogLevel } from "effect"
import * as net from "node:net"
import * as Database from "../../src/persistence/Database.js"
import { layerLifecycle, layerLifecycleDisabled, layerRunnerWith, layerStores } from "../../src/runners/Runner.js"
import { RunnerConfig } from "../../src/runners/RunnerConfig.js"

/** A free TCP port on loopback for a runner's socket server. */
export const freePort = Effect.async<number>((resume) => {
  const server = net.createServer()
  server.listen(0, "127.0.0.1", () => {
    const port = (server.address() as net.AddressInfo).port
    server.close(() => resume(Effect.succeed(port)))
  })
})

/** The runner configuration with defaults and the given overrides (as environment names). */
export const runnerConfig = (env: Record<string, string>) =>
  Effect.withConfigProvider(RunnerConfig, ConfigProvider.fromMap(new Map(Object.entries(env)))).pipe(Effect.orDie)

/**
 * One complete cluster runner (entities, clients, stores) on the given database. Without `lifecycle` its
 * entities only apply what they are sent (no submissions or polls of their own).
 */
export const layerTestRunner = <E, R>(
  database: Layer.Layer<Database.Sql, E, R>,
  options: { readonly lifecycle?: boolean } = {}
) =>
  Layer.unwrapEffect(Effect.gen(function*() {
    const port = yield* freePort
    const c = yield* runnerConfig({ RUNNER_PORT: String(port) })
    return options.lifecycle === true
      ? layerRunnerWith(c, layerLifecycle).pipe(Layer.provideMerge(layerStores(database)))
      : layerRunnerWith(c, layerLifecycleDisabled).pipe(Layer.provideMerge(layerStores(database)))
  }))

/** Tests log warnings and errors only; the runner's INFO lines (every HTTP response) would drown the output. */
export const quietLogs = Logger.minimumLogLevel(LogLevel.Warning)
