import { FetchHttpClient, HttpApiBuilder, HttpApiSwagger, HttpMiddleware, HttpServer } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import { createServer } from "node:http"
import { GenerationTaskLive } from "../entities/GenerationTaskLive.js"
import { TaskClient } from "../entities/TaskClient.js"
import { ControlPlaneApi } from "../http/Api.js"
import { AuthenticationLive, TokenSigner } from "../http/Auth.js"
import { TasksHttpLive } from "../http/TasksHttp.js"
import { routeWebhooks, WebhookGateway } from "../http/Webhooks.js"
import { CallbackInbox } from "../intake/CallbackInbox.js"
import { InboxProcessorLive } from "../intake/InboxProcessor.js"
import * as Database from "../persistence/Database.js"
import { TaskAdmission } from "../persistence/TaskAdmission.js"
import { TaskStore } from "../persistence/TaskStore.js"
import { WriteFence } from "../persistence/WriteFence.js"
import { ProviderRegistry } from "../providers/ProviderRegistry.js"
import { layerCluster } from "./Cluster.js"
import { RunnerConfig } from "./RunnerConfig.js"

/** Everything that needs only the database: migrations run before anything reads a table. */
export const layerStores = <E, R>(database: Layer.Layer<Database.Sql, E, R>) => {
  const migrated = Database.MigrationsLive.pipe(Layer.provideMerge(database))
  return Layer.mergeAll(TaskStore.Default, TaskAdmission.Default, CallbackInbox.Default).pipe(
    Layer.provideMerge(WriteFence.Default),
    Layer.provideMerge(migrated)
  )
}

/** A cluster runner hosting GenerationTask entities, plus the clients that talk to them. */
export const layerRunner = (c: RunnerConfig) =>
  InboxProcessorLive.pipe(
    Layer.provideMerge(Layer.mergeAll(GenerationTaskLive, TaskClient.Default)),
    Layer.provideMerge(layerCluster(c))
  )

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
