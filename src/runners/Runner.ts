import { NodeHttpClient, NodeHttpServer } from "@effect/platform-node"
import * as FetchHttpClient from "@effect/platform/FetchHttpClient"
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import * as HttpApiSwagger from "@effect/platform/HttpApiSwagger"
import * as HttpMiddleware from "@effect/platform/HttpMiddleware"
import * as HttpServer from "@effect/platform/HttpServer"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Effect, Layer, Metric, Stream } from "effect"
import * as Bus from "../bus/NotificationBus.js"
import { RunnerControls } from "../cluster/RunnerControls.js"
import { ShardLockAuditLive } from "../cluster/ShardLockAudit.js"
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
import { BreakersHttpLive } from "../http/admin/BreakersHttp.js"
import { ClusterHttpLive } from "../http/admin/ClusterHttp.js"
import { LateResultsHttpLive } from "../http/admin/LateResultsHttp.js"
import { OperationsHttpLive } from "../http/admin/OperationsHttp.js"
import { OperatorAuthenticationLive } from "../http/admin/OperatorAuth.js"
import { OpsPageLive } from "../http/admin/OpsPage.js"
import { OutputsHttpLive } from "../http/admin/OutputsHttp.js"
import { RedisHttpLive } from "../http/admin/RedisHttp.js"
import { TokensHttpLive } from "../http/admin/TokensHttp.js"
import { ControlPlaneApi } from "../http/Api.js"
import { ApiSettings } from "../http/apiSettings.js"
import { OriginPolicy, TokenSigner } from "../http/Auth.js"
import { AuthenticationLive } from "../http/AuthenticationLive.js"
import { EventsSocketLive } from "../http/EventsSocket.js"
import { EventsSseLive } from "../http/EventsSse.js"
import { HealthRoutesLive } from "../http/Health.js"
import { LivePageLive } from "../http/LivePage.js"
import { MetricsRouteLive } from "../http/MetricsRoute.js"
import { ModeGateLive } from "../http/ModeGate.js"
import { ProjectsHttpLive } from "../http/ProjectsHttp.js"
import { makeServer, RawRoutes } from "../http/RawRoutes.js"
import { limitDeclaredBodies } from "../http/RequestBody.js"
import { Revocations } from "../http/Revocations.js"
import { RunnerState } from "../http/RunnerState.js"
import { SessionHttpLive } from "../http/SessionHttp.js"
import { TasksHttpLive } from "../http/TasksHttp.js"
import { traceIds } from "../http/TraceIds.js"
import { WebhookRouteLive } from "../http/WebhookRoute.js"
import { CallbackInbox } from "../intake/CallbackInbox.js"
import { InboxAdmin } from "../intake/InboxAdmin.js"
import { InboxProcessorLive } from "../intake/InboxProcessor.js"
import { WebhookGateway } from "../intake/Webhooks.js"
import type { ObjectStore as ObjectStoreTag } from "../output/ObjectStore.js"
import * as ObjectStore from "../output/ObjectStoreLive.js"
import { OutputDownloader } from "../output/OutputDownloader.js"
import { OutputWork } from "../output/OutputWork.js"
import { AttemptSchedule } from "../persistence/AttemptSchedule.js"
import * as Database from "../persistence/Database.js"
import { EventLog } from "../persistence/EventLog.js"
import { EventRetentionLive } from "../persistence/EventRetention.js"
import { FenceControl } from "../persistence/FenceControl.js"
import { LateResults } from "../persistence/LateResults.js"
import { MetricsSamplerLive } from "../persistence/MetricsSampler.js"
import { OperatorAudit } from "../persistence/OperatorAudit.js"
import { OperatorQueues } from "../persistence/OperatorQueues.js"
import { Projects } from "../persistence/Projects.js"
import { StreamEpochs } from "../persistence/StreamEpochs.js"
import { TaskAdmission } from "../persistence/TaskAdmission.js"
import { TaskOperations } from "../persistence/TaskOperations.js"
import { TaskSnapshots } from "../persistence/TaskSnapshots.js"
import { TaskStore } from "../persistence/TaskStore.js"
import { TokenDenylist } from "../persistence/TokenDenylist.js"
import { WriteFence } from "../persistence/WriteFence.js"
import { NotificationDispatcherLive } from "../propagation/NotificationDispatcher.js"
import { OutboxRelayLive } from "../propagation/OutboxRelay.js"
import { layerEventQueueFromEnv } from "../propagation/Propagation.js"
import { ProviderClients } from "../providers/ProviderClients.js"
import { ProviderRegistry } from "../providers/ProviderRegistry.js"
import { ProviderBreaker } from "../quota/ProviderBreaker.js"
import { ProviderQuota } from "../quota/ProviderQuota.js"
import * as Redis from "../redis/Redis.js"
import { layerCluster } from "./Cluster.js"
import { allRoles, formatRoles, type Role, ROLES, type Roles } from "./Roles.js"
import { RunnerConfig } from "./RunnerConfig.js"

/** Everything that needs only the database: migrations run before anything reads a table. */
export const layerStores = <E, R>(database: Layer.Layer<Database.Sql, E, R>) => {
  const migrated = Database.MigrationsLive.pipe(Layer.provideMerge(database))
  return Layer.mergeAll(
    TaskStore.Default,
    TaskAdmission.Default,
    Projects.Default,
    CallbackInbox.Default,
    LateResults.Default
  ).pipe(
    Layer.provideMerge(WriteFence.Default),
    Layer.provideMerge(migrated)
  )
}

/**
 * What drives tasks between observations: provider clients and quotas, the poll schedule, the output pipeline
 * (the object store: `layerLifecycle` the settings', `layerLifecycleWith` a given one), Redis from REDIS_URL (in-process quotas without it).
 * Provider calls go through undici's own client, not fetch: every poll and submit is one call, and fetch (web
 * streams over undici) cost 2.9 ms of CPU per GET against 1.1 ms (measured here, 2,000 sequential GETs, server in
 * another process). Redirects are not followed (fetch followed them): no provider API here answers with one.
 */
/**
 * The provider breakers (Redis from REDIS_URL): one value, so that the admin API and the lifecycle of a process
 * share one instance, with its local fallback and credential breakers.
 */
export const layerBreaker = ProviderBreaker.Default.pipe(Layer.provide(Redis.layerFromEnv))

export const layerLifecycleWith = <E>(objectStore: Layer.Layer<ObjectStoreTag, E>) =>
  TaskLifecycle.Default.pipe(
    Layer.provide(Layer.mergeAll(
      ProviderClients.Default,
      ProviderQuota.Default,
      layerBreaker,
      AttemptSchedule.Default,
      TaskOperations.Default,
      OutputDownloader.Default,
      OutputWork.Default
    )),
    Layer.provide(Layer.mergeAll(objectStore, Redis.layerFromEnv, NodeHttpClient.layerUndici))
  )

/** The lifecycle on the object store the settings name (ObjectStoreLive.ts). */
export const layerLifecycle = layerLifecycleWith(ObjectStore.layerFromEnv)

/** `layer` in a process with the role, nothing otherwise. Only for layers that provide nothing others need. */
const when = <E, R>(role: boolean, layer: Layer.Layer<never, E, R>): Layer.Layer<never, E, R> =>
  role ? layer : Layer.empty

/**
 * A cluster runner (a cluster client without `entities`) and what runs on it as its roles say (RunnerConfig's
 * `roles`, Roles.ts): with `entities`, GenerationTask entities (each with its lifecycle), the resume of tasks on
 * acquired shards and the inbox processor; with `singletons`, the sweeper, reconcilers and event retention; the clients
 * that talk to the entities and the metrics sampler in every process; `propagation` as given (layerPropagationFor).
 */
export const layerRunnerWith = <E, R, A2, E2, R2>(
  c: RunnerConfig,
  lifecycle: Layer.Layer<TaskLifecycle, E, R>,
  propagation: Layer.Layer<A2, E2, R2>
) => {
  const has = (role: Role) => c.roles.has(role)
  return Layer.mergeAll(
    // the lifecycle is one layer value: memoized, so the resume (which parks idle tasks) shares the entities' instance
    when(has("entities"), Layer.mergeAll(InboxProcessorLive, ResumeOnAcquireLive).pipe(Layer.provide(lifecycle))),
    // shard locks its own sessions hold for shards it does not serve are freed (src/cluster/ShardLockAudit.ts)
    when(has("entities"), ShardLockAuditLive),
    // the sweeper leaves alone the tasks its own runner holds parked (the same lifecycle instance)
    when(
      has("singletons"),
      Layer.mergeAll(
        has("entities") ? SweeperLive.pipe(Layer.provide(lifecycle)) : SweeperLive,
        ReconcilersLive,
        EventRetentionLive
      )
    ),
    MetricsSamplerLive,
    propagation
  )
    .pipe(
      Layer.provideMerge(
        Layer.mergeAll(when(has("entities"), GenerationTaskLive.pipe(Layer.provide(lifecycle))), TaskClient.Default)
      ),
      Layer.provideMerge(layerCluster(c))
    )
}

/** The notification bus from the environment (Redis, or in process): the API, the gateway and the dispatcher's. */
const layerBus = Bus.layerFromEnv.pipe(Layer.provide(Redis.layerFromEnv))

/**
 * The outbox relay (a cluster singleton: `singletons`) and the notification dispatcher (`dispatcher`) on the event
 * queue from the environment, built where a role runs them; the bus in every process. It serves the API's dead-letter
 * replays and the gateway's feeds too; in a process that uses none of them it is an idle connection (one composition
 * rather than a bus per role combination).
 *
 * The relay runs on the cluster (`layerRunnerWith`'s propagation). The dispatcher and the bus need nothing of the
 * cluster, and are built before it, so that a stopping runner closes them after the cluster handed its shards over:
 * a RocketMQ consumer's receive is a long poll (up to 5 s) that cannot be cancelled, and its stop waits for it to hand
 * its messages back. Closed before the cluster, that wait held the shards on the stopping runner (SIGTERM: its
 * entities served ~3 s longer and the shards moved only then; bench:handoff with ROCKETMQ_ENDPOINTS, stop 40).
 */
export const layerPropagationFor = (roles: Roles) => ({
  onCluster: when(roles.has("singletons"), OutboxRelayLive.pipe(Layer.provide(layerEventQueueFromEnv))),
  underCluster: when(
    roles.has("dispatcher"),
    NotificationDispatcherLive.pipe(Layer.provide(layerEventQueueFromEnv))
  ).pipe(Layer.provideMerge(layerBus))
})

export const layerRunner = (c: RunnerConfig) => {
  const propagation = layerPropagationFor(c.roles)
  return layerRunnerWith(c, layerLifecycle, propagation.onCluster).pipe(Layer.provideMerge(propagation.underCluster))
}

/**
 * What both the API and the event streams read, in every process (no connection of their own, and the testing kit
 * signs its tokens with this signer): the event log, the origin policy, the token signer and the runner's view of the
 * token denylist (one per process: its LISTEN, its refresh and the streams it may have to close).
 */
const layerStreamDeps = Layer.mergeAll(
  EventLog.Default,
  OriginPolicy.Default,
  TokenSigner.Default,
  Revocations.Default.pipe(Layer.provideMerge(TokenDenylist.Default))
)

/** The gateway behind the event streams: project feeds over the notification bus and the event log, with limits. */
const layerEventGateway = EventGateway.Default.pipe(
  Layer.provide(Layer.mergeAll(ProjectFeeds.Default, ConnectionLimits.Default)),
  Layer.provide(layerStreamDeps)
)

/** Browser delivery: SSE and WebSocket streams (raw routes on the Node server), with their auth. */
const layerEventStreams = Layer.mergeAll(EventsSseLive, EventsSocketLive).pipe(Layer.provide(layerEventGateway))

/** The provider webhook gateway, on the Node server's raw routes (src/http/WebhookRoute.ts says why). */
const layerWebhooks = WebhookRouteLive.pipe(
  Layer.provide(WebhookGateway.Default),
  Layer.provide(ProviderRegistry.Default),
  Layer.provide(FetchHttpClient.layer)
)

/** The HTTP API (OpenAPI at /openapi.json, Swagger UI at /docs), the live page at `/` and the operator page. */
const layerApi = Layer.unwrapEffect(
  Effect.map(
    ApiSettings.config,
    (api) => HttpApiBuilder.serve((app) => traceIds(HttpMiddleware.logger(limitDeclaredBodies(api.maxBodyBytes)(app))))
  )
).pipe(
  Layer.provide(HttpApiSwagger.layer({ path: "/docs" })),
  Layer.provide(HttpApiBuilder.middlewareOpenApi({ path: "/openapi.json" })),
  Layer.provide(HttpApiBuilder.api(ControlPlaneApi)),
  Layer.provide(Layer.mergeAll(ProjectsHttpLive, TasksHttpLive, SessionHttpLive, LivePageLive)),
  Layer.provide(
    Layer.mergeAll(
      AdminHttpLive,
      ClusterHttpLive,
      OperationsHttpLive,
      OutputsHttpLive,
      RedisHttpLive,
      LateResultsHttpLive,
      TokensHttpLive,
      BreakersHttpLive,
      OpsPageLive
    )
  ),
  Layer.provide(
    Layer.mergeAll(
      FenceControl.Default,
      StreamEpochs.Default,
      OperatorAudit.Default,
      OperatorQueues.Default,
      InboxAdmin.Default,
      TaskOperations.Default,
      layerBreaker
    )
  ),
  Layer.provide(Layer.mergeAll(TaskSnapshots.Default, AuthenticationLive, OperatorAuthenticationLive))
)

/**
 * A process without `api` answers what its raw routes do not take (the probes, /metrics, its webhooks or streams)
 * with 404 and its roles, so a request sent to the wrong process says where it went.
 */
const layerNotServed = (roles: Roles) =>
  HttpServer.serve(
    HttpServerResponse.unsafeJson(
      { _tag: "NotFound", message: `not served by this process (roles: ${formatRoles(roles)})` },
      { status: 404 }
    )
  )

/**
 * The HTTP side of the roles, on whatever HttpServer is provided: the API (`api`), the provider webhook gateway
 * (`webhooks`) and the event streams (`gateway`) on its RawRoutes, and in every process GET /metrics and the system
 * mode's gates.
 */
export const layerHttpAppFor = (roles: Roles) =>
  Layer.mergeAll(
    roles.has("api") ? layerApi : layerNotServed(roles),
    when(roles.has("gateway"), layerEventStreams),
    when(roles.has("webhooks"), layerWebhooks)
  ).pipe(
    Layer.provideMerge(layerStreamDeps),
    Layer.provideMerge(MetricsRouteLive),
    Layer.provideMerge(ModeGateLive)
  )

/**
 * Every role's HTTP side (the testing kit's), with the event gateway its streams use, for tests that watch it (the
 * same instance: a layer value is built once per build).
 */
export const layerHttpApp = layerHttpAppFor(allRoles).pipe(Layer.provideMerge(layerEventGateway))

/**
 * The probes (src/http/Health.ts) on the raw routes, checking what the roles use: Redis where the entities (quotas),
 * the gateway or the dispatcher need it, RocketMQ where the relay or the dispatcher do (the shard locks come with the
 * cluster runner, Cluster.ts). They are the runner's own layer values, so the one build shares their connections.
 */
const layerHealth = (roles: Roles) => {
  const redis = roles.has("entities") || roles.has("gateway") || roles.has("dispatcher")
  const queue = roles.has("singletons") || roles.has("dispatcher")
  return HealthRoutesLive.pipe(
    Layer.provide(redis ? Redis.layerFromEnv : Layer.empty),
    Layer.provide(queue ? layerEventQueueFromEnv : Layer.empty)
  )
}

/** `app` on a Node server at HTTP_HOST:HTTP_PORT, with the server's raw routes. */
const serveOn = <A, E, R>(c: RunnerConfig, app: Layer.Layer<A, E, R>) =>
  Layer.unwrapEffect(Effect.sync(() => {
    const { routes, server } = makeServer()
    // Built after the listener, so released after the app (its streams ended) and before the listener's own close,
    // which waits for every connection to end: a client that keeps one open (a stream reconnecting while the runner
    // stops, a request whose headers never finish: Node waits for those up to headersTimeout, 60 s) held SIGTERM for
    // a minute. Stop listening, then close what is left.
    const closeLeftConnections = Layer.scopedDiscard(Effect.addFinalizer(() =>
      Effect.sync(() => {
        server.close()
        server.closeAllConnections()
      })
    ))
    return app.pipe(
      HttpServer.withLogAddress,
      Layer.provide(Layer.succeed(RawRoutes, routes)),
      Layer.provide(closeLeftConnections),
      Layer.provide(NodeHttpServer.layer(() => server, { host: c.httpHost, port: c.httpPort }))
    )
  }))

/** The testing kit's HTTP app (every role) on its own server at HTTP_HOST:HTTP_PORT. */
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

const roleGauge = Metric.gauge("runner_role", {
  description: "1 for each role this process has (RUNNER_ROLES), 0 for the others"
})

/** `runner_role{role}`: what this process does, for dashboards that sum by role. */
const layerRoleGauge = (roles: Roles) =>
  Layer.effectDiscard(
    Effect.forEach(ROLES, (role) => Metric.set(Metric.tagged(roleGauge, "role", role), roles.has(role) ? 1 : 0))
  )

/**
 * One runner process: its roles' HTTP side + cluster runner (or client) on DATABASE_URL, or on the embedded PGlite
 * when it is unset. Its RunnerState is in the output: main.ts turns readiness off with it on SIGTERM.
 */
export const RunnerLive = Layer.unwrapEffect(Effect.gen(function*() {
  const c = yield* RunnerConfig
  const http = Layer.mergeAll(
    layerHttpAppFor(c.roles),
    layerHealth(c.roles),
    layerDrainReadiness,
    layerRoleGauge(c.roles)
  )
  return serveOn(c, http).pipe(
    Layer.provide(layerRunner(c)),
    Layer.provideMerge(RunnerState.Default),
    Layer.provide(layerStores(Database.layerFromEnv))
  )
}))
