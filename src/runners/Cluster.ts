import { RunnerAddress } from "@effect/cluster"
import { NodeClusterSocket } from "@effect/platform-node"
import { Option } from "effect"
import type { RunnerConfig } from "./RunnerConfig.js"

/**
 * The cluster runner: shard locks, runner registry and messages in the same PostgreSQL (SqlRunnerStorage +
 * SqlMessageStorage), runner-to-runner traffic over sockets (steadier than HTTP under SIGTERM here).
 */
export const layerCluster = (c: RunnerConfig) =>
  NodeClusterSocket.layer({
    storage: "sql",
    shardingConfig: {
      runnerAddress: Option.some(RunnerAddress.make(c.runnerHost, c.runnerPort)),
      shardsPerGroup: c.shardsPerGroup,
      shardLockExpiration: c.shardLockExpiration,
      shardLockRefreshInterval: c.shardLockRefreshInterval,
      refreshAssignmentsInterval: c.refreshAssignmentsInterval,
      runnerHealthCheckInterval: c.runnerHealthCheckInterval,
      entityMessagePollInterval: c.entityMessagePollInterval,
      entityMaxIdleTime: c.entityMaxIdleTime,
      simulateRemoteSerialization: c.simulateRemoteSerialization
    }
  })
