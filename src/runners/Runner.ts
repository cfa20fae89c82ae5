import { FetchHttpClient, HttpApiBuilder, HttpApiSwagger, HttpMiddleware, HttpServer } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { Effect, Layer, Stream } from "effect"
import { RunnerControls } from "../cluster/RunnerControls.js"
import { GenerationTaskLive } from "../entities/GenerationTaskLive.js"
import { ReconcilersLive } from "../entities/Reconcilers.js"
import { ResumeOnAcquireLive } from "../entities/ResumeOnAcquire.js"
import { SweeperLive } from "../entities/Sweeper.js"
import { TaskClient } from "../entities/TaskClient.js"
import { TaskLifecycle } from "../entities/TaskLifecycle.js"
import { ConnectionLimits } from "../gateway/ConnectionLimits.js"
import { EventGateway } from "../gateway/EventGateway.js"
import { ProjectFeeds } from "../gateway/ProjectFeeds.js"
import { AdminHttpLive } from "../http/admin/AdminHttp.js"
import { ClusterHttpLive } from "../http/admin/ClusterHttp.js"
import { OperationsHttpLive } from "../http/admin/OperationsHttp.js"
import { OperatorAuthenticationLive } from "../http/admin/OperatorAuth.js"
import { OpsPageLive } from "../http/admin/OpsPage.js"
import { ControlPlaneApi } from "../http/Api.js"
import { ApiSettings } from "../http/apiSettings.js"
import { AuthenticationLive, OriginPolicy, TokenSigner } from "../http/Auth.js"
import { EventsSocketLive } from "../http/EventsSocket.js"
import { EventsSseLive } from "../http/EventsSse.js"
import { HealthRoutesLive } from "../http/Health.js"
import { LivePageLive } from "../http/LivePage.js"
import { MetricsRouteLive } from "../http/MetricsRoute.js"
import { ModeGateLive } from "../http/ModeGate.js"
import { ProjectsHttpLive } from "../http/ProjectsHttp.js"
import { makeServer, RawRoutes } from "../http/RawRoutes.js"
import { limitDeclaredBodies } from "../http/RequestBody.js"
import { RunnerState } from "../http/RunnerState.js"
import { SessionHttpLive } from "../http/SessionHttp.js"
import { TasksHttpLive } from "../http/TasksHttp.js"
import { traceIds } from "../http/TraceIds.js"
import { WebhookRouteLive } from "../http/WebhookRoute.js"
import { CallbackInbox } from "../intake/CallbackInbox.js"
import { InboxAdmin } from "../intake/InboxAdmin.js"
import { InboxProcessorLive } from "../intake/InboxProcessor.js"
import { WebhookGateway } from "../intake/Webhooks.js"
import * as ObjectStore from "../output/ObjectStore.js"
import { OutputDownloader } from "../output/OutputDownloader.js"
import { OutputWork } from "../output/OutputWork.js"
import { AttemptSchedule } from "../persistence/AttemptSchedule.js"
import * as Database from "../persistence/Database.js"
import { EventLog } from "../persistence/EventLog.js"
import { EventRetentionLive } from "../persistence/EventRetention.js"
import { FenceControl } from "../persistence/FenceControl.js"
import { MetricsSamplerLive } from "../persistence/MetricsSampler.js"
import { OperatorAudit } from "../persistence/OperatorAudit.js"
import { OperatorQueues } from "../persistence/OperatorQueues.js"
import { Projects } from "../persistence/Projects.js"
import { TaskAdmission } from "../persistence/TaskAdmission.js"
import { TaskOperations } from "../persistence/TaskOperations.js"
import { TaskSnapshots } from "../persistence/TaskSnapshots.js"
import { TaskStore } from "../persistence/TaskStore.js"
import { WriteFence } from "../persistence/WriteFence.js"
import { layerEventQueueFromEnv, layerPropagationFromEnv } from "../propagation/Propagation.js"
import { ProviderClients } from "../providers/ProviderClients.js"
import { ProviderRegistry } from "../providers/ProviderRegistry.js"
import { ProviderQuota } from "../quota/ProviderQuota.js"
import * as Redis from "../redis/Redis.js"
import { layerCluster } from "./Cluster.js"
import { RunnerConfig } from "./RunnerConfig.js"

/** Everything that needs only the database: migrations run before anything reads a table. */
export const layerStores = <E, R>(database: Layer.Layer<Database.Sql, E, R>) => {
  const migrated = Database.MigrationsLive.pipe(Layer.provideMerge(database))
  return Layer.mergeAll(TaskStore.Default, TaskAdmission.Default, Projects.Default, CallbackInbox.Default).pipe(
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
 * A cluster runner hosting GenerationTask entities (each with its lifecycle), the clients that talk to them, the
 * inbox processor, the cluster singletons (sweeper, reconcilers, outbox relay, event retention), the notification
 * dispatcher and the metrics sampler.
 */
export const layerRunnerWith = <E, R, A2, E2, R2>(
  c: RunnerConfig,
  lifecycle: Layer.Layer<TaskLifecycle, E, R>,
  propagation: Layer.Layer<A2, E2, R2>
) =>
  Layer.mergeAll(
    InboxProcessorLive,
    SweeperLive,
    ResumeOnAcquireLive,
    ReconcilersLive,
    EventRetentionLive,
    MetricsSamplerLive,
    propagation
  )
    .pipe(
      Layer.provideMerge(Layer.mergeAll(GenerationTaskLive, TaskClient.Default)),
      Layer.provideMerge(layerCluster(c)),
      Layer.provide(lifecycle)
    )

export const layerRunner = (c: RunnerConfig) => layerRunnerWith(c, layerLifecycle, layerPropagationFromEnv)

/**
 * Browser delivery: SSE and WebSocket streams (raw routes on the Node server) over the project feeds of the
 * notification bus and the event log, with their limits and auth.
 */
const layerEventStreams = Layer.mergeAll(EventsSseLive, EventsSocketLive).pipe(
  Layer.provideMerge(EventGateway.Default),
  Layer.provide(Layer.mergeAll(ProjectFeeds.Default, ConnectionLimits.Default)),
  Layer.provideMerge(Layer.mergeAll(EventLog.Default, OriginPolicy.Default, TokenSigner.Default))
)

/** The provider webhook gateway, on the Node server's raw routes (src/http/WebhookRoute.ts says why). */
const layerWebhooks = WebhookRouteLive.pipe(
  Layer.provide(WebhookGateway.Default),
  Layer.provide(ProviderRegistry.Default),
  Layer.provide(FetchHttpClient.layer)
)

/**
 * The HTTP API (OpenAPI at /openapi.json, Swagger UI at /docs) and the live page at `/`, on whatever HttpServer is
 * provided; the provider webhook gateway, the event streams and GET /metrics on its RawRoutes.
 */
export const layerHttpApp = Layer.unwrapEffect(
  Effect.map(
    ApiSettings.config,
    (api) => HttpApiBuilder.serve((app) => traceIds(HttpMiddleware.logger(limitDeclaredBodies(api.maxBodyBytes)(app))))
  )
).pipe(
  Layer.provide(HttpApiSwagger.layer({ path: "/docs" })),
  Layer.provide(HttpApiBuilder.middlewareOpenApi({ path: "/openapi.json" })),
  Layer.provide(HttpApiBuilder.api(ControlPlaneApi)),
  Layer.provide(Layer.mergeAll(ProjectsHttpLive, TasksHttpLive, SessionHttpLive, LivePageLive)),
  Layer.provide(Layer.mergeAll(AdminHttpLive, ClusterHttpLive, OperationsHttpLive, OpsPageLive)),
  Layer.provide(
    Layer.mergeAll(FenceControl.Default, OperatorAudit.Default, OperatorQueues.Default, InboxAdmin.Default)
  ),
  Layer.provide(Layer.mergeAll(TaskSnapshots.Default, AuthenticationLive, OperatorAuthenticationLive)),
  Layer.provideMerge(layerEventStreams),
  Layer.provideMerge(layerWebhooks),
  Layer.provideMerge(MetricsRouteLive),
  Layer.provideMerge(ModeGateLive)
)

/**
 * The probes (src/http/Health.ts) on the raw routes. Redis and the event queue are the runner's own: the same layer
 * values as the lifecycle's and propagation's, so the one build shares their connections.
 */
const layerHealth = HealthRoutesLive.pipe(Layer.provide(Layer.mergeAll(Redis.layerFromEnv, layerEventQueueFromEnv)))

/** `app` on a Node server at HTTP_HOST:HTTP_PORT, with the server's raw routes. */
const serveOn = <A, E, R>(c: RunnerConfig, app: Layer.Layer<A, E, R>) =>
  Layer.unwrapEffect(Effect.sync(() => {
    const { routes, server } = makeServer()
    return app.pipe(
      HttpServer.withLogAddress,
      Layer.provide(Layer.succeed(RawRoutes, routes)),
      Layer.provide(NodeHttpServer.layer(() => server, { host: c.httpHost, port: c.httpPort }))
    )
  }))

export const layerHttp = (c: RunnerConfig) => serveOn(c, layerHttpApp)

/**
 * A drained runner (by an operator, on any runner: it learns it at its next assignment refresh) answers not-ready
 * with `draining` while it keeps serving, and ready again once undrained.
 */
const layerDrainReadiness = Layer.scopedDiscard(Effect.gen(function*() {
  const controls = yield* RunnerControls
  const state = yield* RunnerState
  yield* controls.selfDrainingChanges.pipe(Stream.runForEach(state.setDraining), Effect.forkScoped)
}))

/**
 * One runner process: HTTP API + cluster runner on DATABASE_URL, or on the embedded PGlite when it is unset. Its
 * RunnerState is in the output: main.ts turns readiness off with it on SIGTERM.
 */
export const RunnerLive = Layer.unwrapEffect(Effect.gen(function*() {
  const c = yield* RunnerConfig
  return serveOn(c, Layer.mergeAll(layerHttpApp, layerHealth, layerDrainReadiness)).pipe(
    Layer.provide(layerRunner(c)),
    Layer.provideMerge(RunnerState.Default),
    Layer.provide(layerStores(Database.layerFromEnv))
  )
}))
