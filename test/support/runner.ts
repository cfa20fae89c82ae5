import { ConfigProvider, Effect, Layer, Redacted, Scope } from "effect"
import type { ObjectStore } from "../../src/output/ObjectStore.js"
import * as Database from "../../src/persistence/Database.js"
import type { layerPropagationMemory } from "../../src/propagation/Propagation.js"
import { layerRunnerWith, layerStores } from "../../src/runners/Runner.js"
import { RunnerConfig } from "../../src/runners/RunnerConfig.js"
import * as Kit from "../../src/testing/TestRunner.js"
import { allocatePort } from "./ports.js"

export { quietLogs, withSettings } from "../../src/testing/TestRunner.js"

/** A free TCP port on loopback, never handed to another caller of this test process (see ports.ts). */
export const freePort = Effect.promise(allocatePort)

/** The runner configuration with defaults and the given overrides (as environment names). */
export const runnerConfig = (env: Record<string, string>) =>
  Effect.withConfigProvider(RunnerConfig, ConfigProvider.fromMap(new Map(Object.entries(env)))).pipe(Effect.orDie)

/**
 * The kit's test runner layer (src/testing/TestRunner.ts) on the given database, its cluster port from this
 * process's block (ports.ts). Without `lifecycle` its entities only apply what they are sent.
 */
export const layerTestRunner = <E, R>(
  database: Layer.Layer<Database.Sql, E, R>,
  options: {
    readonly lifecycle?: boolean
    readonly objectStore?: Layer.Layer<ObjectStore, unknown>
    readonly propagation?: typeof layerPropagationMemory
    readonly settings?: Readonly<Record<string, string>>
  } = {}
) =>
  Layer.unwrapEffect(
    Effect.map(freePort, (runnerPort) => Kit.layerTestRunner({ ...options, database, runnerPort }))
  )

/** A complete runner (its own pool, stores, cluster runner) started in its own scope, like its own process. */
export const startScopedRunner = <E, R>(
  url: string,
  propagation: Layer.Layer<never, E, R>,
  settings: Readonly<Record<string, string>> = {}
) =>
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
      layerRunnerWith(c, Kit.layerLifecycleDisabled, propagation).pipe(
        Layer.provideMerge(layerStores(database)),
        Layer.provide(Kit.quietLogs),
        Layer.provide(Kit.withSettings(settings))
      ),
      scope
    )
    return { context, scope, port }
  })
