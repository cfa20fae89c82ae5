import * as S from "../config/Settings.js"
import { rolesSetting } from "./Roles.js"

/**
 * One runner: its HTTP listener, its address for runner-to-runner sockets and its cluster settings. This record is
 * the only reader of these names: Cluster.ts hands it to @effect/cluster as a ShardingConfig, whose own
 * `layerFromEnv` (the same names with the library's defaults) is not used. Defaults suit one machine and fast
 * handoff.
 */
export const RunnerSettings = S.area("Runner", "roles, HTTP listener, runner-to-runner address and cluster timing", {
  roles: rolesSetting,
  httpHost: S.string("HTTP_HOST", "interface the HTTP API listens on", "127.0.0.1"),
  httpPort: S.port("HTTP_PORT", "port of the HTTP API", 3000),
  runnerHost: S.string("RUNNER_HOST", "host other runners reach this one at (runner-to-runner sockets)", "127.0.0.1"),
  runnerPort: S.port("RUNNER_PORT", "port of the runner-to-runner sockets", 34431),
  // an operator's `runner weight` (kept in the database) takes precedence until set again
  runnerWeight: S.integer(
    "RUNNER_WEIGHT",
    "this runner's share of shards relative to the others (1 and 3: 25% and 75%); `npm run ops -- runner weight` " +
      "overrides it at runtime",
    1,
    { min: 1, max: 1000 }
  ),
  shardsPerGroup: S.integer("SHARDS_PER_GROUP", "shards per shard group; the same on every runner", 300, { min: 1 }),
  // A killed runner's shards move as soon as its runner port refuses connections (src/cluster/RefusedRunners.ts:
  // ~1–2 s after kill -9 in bench:handoff), whatever these are. These bound the rest: a runner whose machine or
  // network vanished is dropped after the expiration. A renewal that takes longer than min(refresh interval,
  // expiration / 3) makes the runner give up all its shards ("Shard lock storage is unhealthy"): at 6 s / 2 s that
  // was 2 s, which a loaded machine exceeded (13 losses in one bench:handoff run at load 20); 15 s / 5 s: none.
  shardLockExpiration: S.duration(
    "SHARD_LOCK_EXPIRATION",
    "a runner that stopped renewing its locks (machine or network lost) is dropped after this; a killed process is " +
      "seen at once (its port refuses)",
    "15 seconds"
  ),
  shardLockRefreshInterval: S.duration(
    "SHARD_LOCK_REFRESH_INTERVAL",
    "how often a runner renews its shard locks; a renewal slower than this or a third of SHARD_LOCK_EXPIRATION gives " +
      "the runner's shards up",
    "5 seconds"
  ),
  refreshAssignmentsInterval: S.duration(
    "REFRESH_ASSIGNMENTS_INTERVAL",
    "how often a runner re-reads the runner list and shard assignments; a runner joining or leaving is heard at " +
      "once (NOTIFY), this is the safety net",
    "1 second"
  ),
  runnerHealthCheckInterval: S.duration(
    "RUNNER_HEALTH_CHECK_INTERVAL",
    "how often runners check each other's health",
    "2 seconds"
  ),
  // A message to a task whose shard is moving (released by one runner, not yet taken by the next) is sent again after
  // this (the library's own default is 100 ms): the last task to answer after a SIGTERM waited up to a whole
  // interval past its shard's arrival (bench:handoff). A retry is a lookup in memory while the shard is in transit.
  sendRetryInterval: S.duration(
    "SEND_RETRY_INTERVAL",
    "a message to an entity whose shard is moving between runners is sent again after this",
    "20 millis"
  ),
  entityMessagePollInterval: S.duration(
    "ENTITY_MESSAGE_POLL_INTERVAL",
    "how often unprocessed entity messages are polled from storage",
    "1 second"
  ),
  entityMaxIdleTime: S.duration(
    "ENTITY_MAX_IDLE_TIME",
    "an entity without messages is stopped after this",
    "5 minutes"
  ),
  // Encoding and decoding every message to an entity on the same runner (as if it were remote) costs CPU on
  // the hot path; messages between runners are always serialized. Turn on to test serialization locally.
  simulateRemoteSerialization: S.boolean(
    "SIMULATE_REMOTE_SERIALIZATION",
    "serialize messages to local entities too (costs CPU on the hot path; for testing serialization)",
    false
  )
})

/** The runner's record (tests read it with their own ConfigProvider). */
export const RunnerConfig = RunnerSettings.config
export type RunnerConfig = S.AreaOf<typeof RunnerSettings>
