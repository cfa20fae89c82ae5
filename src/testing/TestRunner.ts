import { NodeHttpClient, NodeHttpServer } from "@effect/platform-node"
import * as HttpServer from "@effect/platform/HttpServer"
import { ConfigProvider, Effect, Layer, Logger, LogLevel, Redacted } from "effect"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { makeParkedTasks } from "../entities/ParkedTasks.js"
import { makeShardsLeft } from "../entities/shardsLeft.js"
import { TaskLifecycle } from "../entities/TaskLifecycle.js"
import { makeServer, RawRoutes } from "../http/RawRoutes.js"
import type { ObjectStore } from "../output/ObjectStore.js"
import * as Database from "../persistence/Database.js"
import { layerPropagationMemory } from "../propagation/Propagation.js"
import { layerHttpApp, layerLifecycle, layerLifecycleWith, layerRunnerWith, layerStores } from "../runners/Runner.js"
import { RunnerConfig } from "../runners/RunnerConfig.js"

/**
 * Settings for the layers under test, as the environment would give them (`{ POLL_INTERVAL_SCALE: "0.05" }`), over
 * the real environment. A layer reads its settings when it is built, so provide this below everything it configures:
 * `TestLayer.pipe(Layer.provide(withSettings({...})))`. Tests never write the environment (files run in parallel in
 * one process, and a setting written by one would leak into the next).
 */
export const withSettings = (settings: Readonly<Record<string, string>>) =>
  // over the provider in effect where it is built (the environment's, or outer settings'), so settings nest
  Layer.unwrapEffect(Effect.configProviderWith((current) =>
    Effect.succeed(Layer.setConfigProvider(
      ConfigProvider.fromMap(new Map(Object.entries(settings))).pipe(ConfigProvider.orElse(() => current))
    ))
  ))

/** The ConfigProvider behind `withSettings`, for `Effect.withConfigProvider` where there is no layer. */
export const settingsProvider = (settings: Readonly<Record<string, string>>) =>
  ConfigProvider.fromMap(new Map(Object.entries(settings))).pipe(ConfigProvider.orElse(() => ConfigProvider.fromEnv()))

/**
 * Entities that only apply the observations and commands sent to them, with no lifecycle of their own (no
 * submissions, polls or output downloads): for testing the entity and what reacts to it in isolation.
 */
export const layerLifecycleDisabled = Layer.succeed(
  TaskLifecycle,
  TaskLifecycle.make({
    drive: () => Effect.void,
    recheck: () => Effect.void,
    parked: makeParkedTasks(),
    wakeParked: () => Effect.never,
    shardsLeft: makeShardsLeft()
  })
)

/** The HTTP app (API, live page, webhook gateway, event streams) on its own server on a free port, with a client. */
export const layerHttpTest = Layer.unwrapEffect(Effect.sync(() => {
  const { routes, server } = makeServer()
  return layerHttpApp.pipe(
    Layer.provide(Layer.succeed(RawRoutes, routes)),
    Layer.provideMerge(HttpServer.layerTestClient),
    Layer.provide(NodeHttpClient.layerWithoutAgent),
    Layer.provide(NodeHttpClient.makeAgentLayer({ keepAlive: false })),
    Layer.provideMerge(NodeHttpServer.layer(() => server, { port: 0 }))
  )
}))

/**
 * The embedded PostgreSQL (PGlite) in a fresh temporary folder, removed afterwards: a real database with no server
 * to run. It serves one runner (PGlite is one session), which is what a test runner layer is.
 */
export const layerEmbeddedDatabase = Layer.unwrapScoped(
  Effect.map(
    Effect.acquireRelease(
      Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "tcp-test-pglite-"))),
      (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
    ),
    (dir) => Database.layerEmbedded(dir)
  )
)

/** PostgreSQL at `url` (for instance a database of the test's own on the server DATABASE_URL names). */
export const layerDatabaseAt = (url: string, maxConnections = 10) =>
  Database.layerPostgres({ url: Redacted.make(url), maxConnections, applicationName: "test" })

/** A TCP port the kernel says is free now (the cluster runner's own port, which nothing connects to in one runner). */
export const freePort = Effect.async<number>((resume) => {
  const server = net.createServer()
  server.listen(0, "127.0.0.1", () => {
    const { port } = server.address() as net.AddressInfo
    server.close(() => resume(Effect.succeed(port)))
  })
})

export interface TestRunnerOptions<E, R> {
  /** Where the stores live: the embedded PGlite by default, or any database layer (`layerDatabaseAt(url)`). */
  readonly database?: Layer.Layer<Database.Sql, E, R>
  /**
   * With `true` the entities drive their tasks (submit, poll, download outputs) against the configured providers,
   * e.g. the simulator (`src/testing/Simulator.ts`); by default they only apply what they are sent.
   */
  readonly lifecycle?: boolean
  /** With `lifecycle`, the object store outputs go to; the one the settings name by default (OBJECT_STORE…). */
  readonly objectStore?: Layer.Layer<ObjectStore, unknown>
  /** Propagation (outbox relay, dispatcher): the in-process queue and bus unless another is given. */
  readonly propagation?: Layer.Layer<never, unknown, unknown>
  /** The cluster runner's port; a free one by default. */
  readonly runnerPort?: number
  /** Settings over the environment for everything the runner builds (see `withSettings`). */
  readonly settings?: Readonly<Record<string, string>>
}

/**
 * One complete cluster runner without HTTP: GenerationTask entities, TaskClient, the stores (migrated), the inbox
 * processor, the cluster singletons and propagation on the in-process queue and bus. On the embedded PGlite unless
 * `database` says otherwise. Add `layerHttpTest` on top for the HTTP API.
 */
export const layerTestRunner = <E = never, R = never>(options: TestRunnerOptions<E, R> = {}) =>
  Layer.unwrapEffect(Effect.gen(function*() {
    const port = options.runnerPort ?? (yield* freePort)
    const c = yield* Effect.withConfigProvider(
      RunnerConfig,
      ConfigProvider.fromMap(new Map(Object.entries({ ...options.settings, RUNNER_PORT: String(port) })))
    ).pipe(Effect.orDie)
    const propagation = (options.propagation ?? layerPropagationMemory) as typeof layerPropagationMemory
    const database = (options.database ?? layerEmbeddedDatabase) as Layer.Layer<Database.Sql, E, R>
    const lifecycle = options.lifecycle !== true
      ? layerLifecycleDisabled
      : options.objectStore === undefined
      ? layerLifecycle
      : layerLifecycleWith(options.objectStore)
    return layerRunnerWith(c, lifecycle, propagation).pipe(
      Layer.provideMerge(layerStores(database))
    )
  })).pipe(Layer.provide(withSettings(options.settings ?? {})))

/** Warnings and errors only: a runner's INFO lines (every HTTP response, every shard move) drown a test's output. */
export const quietLogs = Logger.minimumLogLevel(LogLevel.Warning)
