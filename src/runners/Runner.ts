import { FetchHttpClient, HttpApiBuilder, HttpApiSwagger, HttpMiddleware, HttpServer } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import { createServer } from "node:http"
import { GenerationTaskLive } from "../entities/GenerationTaskLive.js"
import { TaskClient } from "../entities/TaskClient.js"
import { TaskLifecycle } from "../entities/TaskLifecycle.js"
import { ControlPlaneApi } from "../http/Api.js"
import { AuthenticationLive, TokenSigner } from "../http/Auth.js"
import { TasksHttpLive } from "../http/TasksHttp.js"
import { routeWebhooks, WebhookGateway } from "../http/Webhooks.js"
import { CallbackInbox } from "../intake/CallbackInbox.js"
import { InboxProcessorLive } from "../intake/InboxProcessor.js"
import * as ObjectStore from "../output/ObjectStore.js"
import { OutputDownloader } from "../output/OutputDownloader.js"
import { OutputWork } from "../output/OutputWork.js"
import { AttemptSchedule } from "../persistence/AttemptSchedule.js"
import * as Database from "../persistence/Database.js"
import { TaskAdmission } from "../persistence/TaskAdmission.js"
import { TaskOperations } from "../persistence/TaskOperations.js"
import { TaskStore } from "../persistence/TaskStore.js"
import { WriteFence } from "../persistence/WriteFence.js"
import { ProviderClients } from "../providers/ProviderClients.js"
import { ProviderRegistry } from "../providers/ProviderRegistry.js"
import { ProviderQuota } from "../quota/ProviderQuota.js"
import * as Redis from "../redis/Redis.js"
import { layerCluster } from "./Cluster.js"
import { layerPropagationFromEnv } from "./Propagation.js"
import { ReconcilersLive } from "./Reconcilers.js"
import { RunnerConfig } from "./RunnerConfig.js"
import { SweeperLive } from "./Sweeper.js"

/** Everything that needs only the database: migrations run before anything reads a table. */
export const layerStores = <E, R>(database: Layer.Layer<Database.Sql, E, R>) => {
  const migrated = Database.MigrationsLive.pipe(Layer.provideMerge(database))
  return Layer.mergeAll(TaskStore.Default, TaskAdmission.Default, CallbackInbox.Default).pipe(
    Layer.provideMerge(WriteFence.Default),
    Layer.provideMerge(migrated)
  )
}

/**
 * What drives tasks between observations: provider clients and quotas, the poll schedule, the output pipeline
 * (object store from OBJECT_STORE_DIR), Redis from REDIS_URL (in-process quotas without it).
 */
export const layerLifecycle = TaskLifecycle.Default.pipe(
  Layer.provide(Layer.mergeAll(
    ProviderClients.Default,
    ProviderQuota.Default,
    AttemptSchedule.Default,
    TaskOperations.Default,
    OutputDownloader.Default,
    OutputWork.Default
  )),
  Layer.provide(Layer.mergeAll(ObjectStore.layerFromEnv, Redis.layerFromEnv, FetchHttpClient.layer))
)

/**
 * Entities that only apply the observations and commands sent to them, with no lifecycle of their own: for
 * measuring or testing the entity in isolation (bench:transitions, the entity and intake tests).
 */
export const layerLifecycleDisabled = Layer.succeed(TaskLifecycle, TaskLifecycle.make({ drive: () => Effect.void }))

/**
 * A cluster runner hosting GenerationTask entities (each with its lifecycle), the clients that talk to them, the
 * inbox processor, the cluster singletons (sweeper, reconcilers, outbox relay) and the notification dispatcher.
 */
export const layerRunnerWith = <E, R, E2, R2>(
  c: RunnerConfig,
  lifecycle: Layer.Layer<TaskLifecycle, E, R>,
  propagation: Layer.Layer<never, E2, R2>
) =>
  Layer.mergeAll(InboxProcessorLive, SweeperLive, ReconcilersLive, propagation).pipe(
    Layer.provideMerge(Layer.mergeAll(GenerationTaskLive, TaskClient.Default)),
    Layer.provideMerge(layerCluster(c)),
    Layer.provide(lifecycle)
  )

export const layerRunner = (c: RunnerConfig) => layerRunnerWith(c, layerLifecycle, layerPropagationFromEnv)

/**
 * The HTTP API (OpenAPI at /openapi.json, Swagger UI at /docs) and, in front of it, the provider webhook
 * gateway, on whatever HttpServer is provided.
 */
export const layerHttpApp = Layer.unwrapEffect(
  Effect.map(
    WebhookGateway,
    (gateway) => HttpApiBuilder.serve((app) => routeWebhooks(gateway)(HttpMiddleware.logger(app)))
  )
).pipe(
  Layer.provide(HttpApiSwagger.layer({ path: "/docs" })),
  Layer.provide(HttpApiBuilder.middlewareOpenApi({ path: "/openapi.json" })),
  Layer.provide(HttpApiBuilder.api(ControlPlaneApi)),
  Layer.provide(TasksHttpLive),
  Layer.provide(AuthenticationLive),
  Layer.provide(WebhookGateway.Default),
  Layer.provide(ProviderRegistry.Default),
  Layer.provide(FetchHttpClient.layer),
  Layer.provideMerge(TokenSigner.Default),
  // provider callbacks come by the thousand per second: no request span for them (failures are logged)
  HttpMiddleware.withTracerDisabledWhen((request) => request.url.startsWith("/webhooks/"))
)

export const layerHttp = (c: RunnerConfig) =>
  layerHttpApp.pipe(
    HttpServer.withLogAddress,
    Layer.provide(NodeHttpServer.layer(createServer, { host: c.httpHost, port: c.httpPort }))
  )

/** One runner process: HTTP API + cluster runner on DATABASE_URL, or on the embedded PGlite when it is unset. */
export const RunnerLive = Layer.unwrapEffect(Effect.gen(function*() {
  const c = yield* RunnerConfig
  return layerHttp(c).pipe(
    Layer.provide(layerRunner(c)),
    Layer.provide(layerStores(Database.layerFromEnv))
  )
}))
