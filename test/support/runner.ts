import { ConfigProvider, Effect, Layer, Logger, LogLevel, Redacted, Scope } from "effect"
import * as Database from "../../src/persistence/Database.js"
import { layerPropagationMemory } from "../../src/propagation/Propagation.js"
import { layerLifecycle, layerLifecycleDisabled, layerRunnerWith, layerStores } from "../../src/runners/Runner.js"
import { RunnerConfig } from "../../src/runners/RunnerConfig.js"
import { allocatePort } from "./ports.js"

/** A free TCP port on loopback, never handed to another caller of this test process (see ports.ts). */
export const freePort = Effect.promise(allocatePort)

/** The runner configuration with defaults and the given overrides (as environment names). */
export const runnerConfig = (env: Record<string, string>) =>
  Effect.withConfigProvider(RunnerConfig, ConfigProvider.fromMap(new Map(Object.entries(env)))).pipe(Effect.orDie)

/**
 * One complete cluster runner (entities, clients, stores) on the given database. Without `lifecycle` its
 * entities only apply what they are sent (no submissions or polls of their own). Propagation runs on the
 * in-process queue and bus unless another is given.
 */
export const layerTestRunner = <E, R>(
  database: Layer.Layer<Database.Sql, E, R>,
  options: { readonly lifecycle?: boolean; readonly propagation?: typeof layerPropagationMemory } = {}
) =>
  Layer.unwrapEffect(Effect.gen(function*() {
    const port = yield* freePort
    const c = yield* runnerConfig({ RUNNER_PORT: String(port) })
    const propagation = options.propagation ?? layerPropagationMemory
    return options.lifecycle === true
      ? layerRunnerWith(c, layerLifecycle, propagation).pipe(Layer.provideMerge(layerStores(database)))
      : layerRunnerWith(c, layerLifecycleDisabled, propagation).pipe(Layer.provideMerge(layerStores(database)))
  }))

/** Tests log warnings and errors only; the runner's INFO lines (every HTTP response) would drown the output. */
export const quietLogs = Logger.minimumLogLevel(LogLevel.Warning)

/** A complete runner (its own pool, stores, cluster runner) started in its own scope, like its own process. */
export const startScopedRunner = <E, R>(url: string, propagation: Layer.Layer<never, E, R>) =>
  Effect.gen(function*() {
    const port = yield* freePort
    const c = yield* runnerConfig({ RUNNER_PORT: String(port) })
    const scope = yield* Scope.make()
    const database = Database.layerPostgres({
      url: Redacted.make(url),
      maxConnections: 8,
      applicationName: `runner-${port}`
    })
    const context = yield* Layer.buildWithScope(
      layerRunnerWith(c, layerLifecycleDisabled, propagation).pipe(
        Layer.provideMerge(layerStores(database)),
        Layer.provide(quietLogs)
      ),
      scope
    )
    return { context, scope, port }
  })
