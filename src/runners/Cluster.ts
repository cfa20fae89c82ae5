import {
  RunnerAddress,
  RunnerHealth,
  Runners,
  ShardingConfig,
  SocketRunner,
  SqlMessageStorage,
  SqlRunnerStorage
} from "@effect/cluster"
import { NodeClusterSocket } from "@effect/platform-node"
import { RpcSerialization } from "@effect/rpc"
import { Duration, Effect, Layer, Option, Schedule } from "effect"
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
 */
export const layerCluster = (c: RunnerConfig) =>
  SocketRunner.layer.pipe(
    Layer.provide([NodeClusterSocket.layerSocketServer, NodeClusterSocket.layerClientProtocol]),
    Layer.provide(RunnerHealth.layerPing.pipe(
      Layer.provide(Runners.layerRpc),
      Layer.provide(NodeClusterSocket.layerClientProtocol)
    )),
    Layer.provideMerge(clusterTables(SqlMessageStorage.layer)),
    // the runner storage as the cluster uses it, with its shard-lock refreshes observed for /readyz
    Layer.provideMerge(ShardLockWatch.layerWatched),
    Layer.provide(clusterTables(SqlRunnerStorage.layer)),
    Layer.provide(ShardingConfig.layer({
      runnerAddress: Option.some(RunnerAddress.make(c.runnerHost, c.runnerPort)),
      shardsPerGroup: c.shardsPerGroup,
      shardLockExpiration: c.shardLockExpiration,
      shardLockRefreshInterval: c.shardLockRefreshInterval,
      refreshAssignmentsInterval: c.refreshAssignmentsInterval,
      runnerHealthCheckInterval: c.runnerHealthCheckInterval,
      entityMessagePollInterval: c.entityMessagePollInterval,
      entityMaxIdleTime: c.entityMaxIdleTime,
      simulateRemoteSerialization: c.simulateRemoteSerialization
    })),
    Layer.provide(RpcSerialization.layerMsgPack)
  )

/**
 * The cluster's storage creates its tables when it starts. Two runners starting at once on an empty database both
 * create them, and one loses on PostgreSQL's catalog (`duplicate key … pg_type_typname_nsp_index`, seen in the
 * two-runner test): it tries again, and finds them made.
 */
const clusterTables = <A, E, R>(storage: Layer.Layer<A, E, R>) =>
  storage.pipe(
    Layer.tapErrorCause((cause) => Effect.logWarning("cluster storage did not start; trying again", cause)),
    Layer.retry(
      backoffSchedule({ base: Duration.millis(200), cap: Duration.seconds(2) }).pipe(Schedule.upTo("30 seconds"))
    ),
    Layer.orDie
  )
