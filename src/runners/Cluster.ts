import {
  RunnerAddress,
  RunnerHealth,
  Runners,
  RunnerStorage,
  ShardingConfig,
  SocketRunner,
  SqlMessageStorage,
  SqlRunnerStorage
} from "@effect/cluster"
import { NodeClusterSocket } from "@effect/platform-node"
import { RpcSerialization } from "@effect/rpc"
import { Duration, Effect, Layer, Option, Schedule } from "effect"
import { ClusterView } from "../cluster/ClusterView.js"
import { layerPromptAcquire } from "../cluster/PromptAcquire.js"
import { layerRefusedRunners } from "../cluster/RefusedRunners.js"
import { layerRunnerChanges, LIBRARY_REFRESH_PAUSE } from "../cluster/RunnerChanges.js"
import { layerRunnerStorage, RunnerControls } from "../cluster/RunnerControls.js"
import { RunnerReportsLive } from "../cluster/RunnerReports.js"
import { backoffSchedule } from "../domain/backoff.js"
import * as ShardLockWatch from "../http/ShardLockWatch.js"
import type { RunnerConfig } from "./RunnerConfig.js"

/**
 * The cluster runner: shard locks, runner registry and messages in the same PostgreSQL (SqlRunnerStorage +
 * SqlMessageStorage), runner-to-runner traffic over sockets (steadier than HTTP under SIGTERM here).
 *
 * Composed as `NodeClusterSocket.layer({ storage: "sql" })` does, except for its ShardingConfig: that one is
 * `ShardingConfig.layerFromEnv`, which reads the environment a second time (and names such as PORT) under the
 * library's defaults. Here the runner's record is the ShardingConfig; what it does not set keeps the library's
 * default.
 *
 * Without the `entities` role (Roles.ts) the process is a cluster client, as `NodeClusterSocket.layer({ clientOnly:
 * true })` composes it: no runner address, so it never registers, holds no shard and runs no entity or singleton,
 * binds no RUNNER_PORT and needs no health pings; it reads the same runner list and shard map and sends to the runners
 * that host the entities. It reads the operators' controls like a runner does (the admin API answers from any
 * process), and there are no shard-lock refreshes of its own to watch for /readyz.
 *
 * The runner storage carries the operators' drains and weights (src/cluster/RunnerControls.ts); ClusterView (the
 * admin API's view of runners and shards) and the runner's reports of what it holds come with it.
 */
export const layerCluster = (c: RunnerConfig) => {
  const hostsShards = c.roles.has("entities")
  const sockets = hostsShards
    ? SocketRunner.layer.pipe(
      Layer.provide([NodeClusterSocket.layerSocketServer, NodeClusterSocket.layerClientProtocol]),
      Layer.provide(RunnerHealth.layerPing.pipe(
        Layer.provide(Runners.layerRpc),
        Layer.provide(NodeClusterSocket.layerClientProtocol)
      ))
    )
    : SocketRunner.layerClientOnly.pipe(Layer.provide(NodeClusterSocket.layerClientProtocol))
  // typed as the storage only: the watch (ShardLockWatch) is there when this runner holds shard locks, and /readyz
  // checks it where it finds it (src/http/Health.ts)
  const watched: Layer.Layer<
    RunnerStorage.RunnerStorage,
    never,
    RunnerStorage.RunnerStorage | ShardingConfig.ShardingConfig
  > = hostsShards ? ShardLockWatch.layerWatched : Layer.effect(RunnerStorage.RunnerStorage, RunnerStorage.RunnerStorage)
  return Layer.mergeAll(ClusterView.Default, RunnerReportsLive).pipe(
    Layer.provideMerge(sockets),
    // built before Sharding (in `sockets`), so released after it: its stop has given up every shard lock by then
    Layer.provideMerge(hostsShards ? layerLogHandedOver : Layer.empty),
    Layer.provideMerge(clusterTables(SqlMessageStorage.layer)),
    // Sharding's runner storage: the runner list read at once when a runner joins or leaves (RunnerChanges.ts), over
    // runners refusing connections taken as gone (RefusedRunners.ts), over acquisitions that
    // ask again promptly for shards still being released (PromptAcquire.ts), over the operators'
    // drains and weights laid over the runner list, over the storage whose shard-lock refreshes are observed for
    // /readyz, over SqlRunnerStorage
    Layer.provide(layerRunnerChanges(c.refreshAssignmentsInterval)),
    Layer.provide(layerRefusedRunners),
    Layer.provide(layerPromptAcquire),
    Layer.provide(layerRunnerStorage),
    Layer.provideMerge(watched),
    Layer.provide(clusterTables(SqlRunnerStorage.layer)),
    Layer.provideMerge(RunnerControls.Default),
    Layer.provideMerge(ShardingConfig.layer({
      runnerAddress: hostsShards ? Option.some(RunnerAddress.make(c.runnerHost, c.runnerPort)) : Option.none(),
      runnerShardWeight: c.runnerWeight,
      shardsPerGroup: c.shardsPerGroup,
      shardLockExpiration: c.shardLockExpiration,
      shardLockRefreshInterval: c.shardLockRefreshInterval,
      // the interval is waited out in the storage, which a runner joining or leaving cuts short (RunnerChanges.ts)
      refreshAssignmentsInterval: LIBRARY_REFRESH_PAUSE,
      runnerHealthCheckInterval: c.runnerHealthCheckInterval,
      sendRetryInterval: c.sendRetryInterval,
      entityMessagePollInterval: c.entityMessagePollInterval,
      entityMaxIdleTime: c.entityMaxIdleTime,
      simulateRemoteSerialization: c.simulateRemoteSerialization
    })),
    Layer.provide(RpcSerialization.layerMsgPack)
  )
}

/** The line an operator (and the stop-order test) reads for "this runner's shards are free for the others". */
const layerLogHandedOver = Layer.scopedDiscard(
  Effect.addFinalizer(() => Effect.logInfo("cluster runner stopped: its shards are handed over"))
)

/**
 * The cluster's storage creates its tables when it starts. Two runners starting at once on an empty database both
 * create them, and one loses on PostgreSQL's catalog (`duplicate key … pg_type_typname_nsp_index`, seen in the
 * two-runner test): it tries again, and finds them made.
 */
const clusterTables = <A, E, R>(storage: Layer.Layer<A, E, R>) =>
  storage.pipe(
    // SqlMessageStorage runs its migrator under Effect.orDie: the lost race is a defect, which Layer.retry would not
    // see (a runner of the Prometheus test exited on it), so every cause becomes a failure to retry
    Layer.catchAllCause((cause) => Layer.fail(cause)),
    Layer.tapErrorCause((cause) => Effect.logWarning("cluster storage did not start; trying again", cause)),
    Layer.retry(
      backoffSchedule({ base: Duration.millis(200), cap: Duration.seconds(2) }).pipe(Schedule.upTo("30 seconds"))
    ),
    Layer.orDie
  )
