import { Config } from "effect"

/** Every setting of a runner, from the environment (CONSTANT_CASE); defaults suit one machine and fast handoff. */
export const RunnerConfig = Config.all({
  httpHost: Config.string("HTTP_HOST").pipe(Config.withDefault("127.0.0.1")),
  httpPort: Config.port("HTTP_PORT").pipe(Config.withDefault(3000)),
  runnerHost: Config.string("RUNNER_HOST").pipe(Config.withDefault("127.0.0.1")),
  runnerPort: Config.port("RUNNER_PORT").pipe(Config.withDefault(34431)),
  shardsPerGroup: Config.integer("SHARDS_PER_GROUP").pipe(Config.withDefault(300)),
  // Measured here: with 6 s / 1 s / 2 s a killed runner's shards answer elsewhere after ~6.4 s (35 s / 3 s /
  // 1 min defaults: ~30 s). A SIGTERM'd runner hands its shards over in ~1.5–2.5 s either way.
  shardLockExpiration: Config.duration("SHARD_LOCK_EXPIRATION").pipe(Config.withDefault("6 seconds")),
  shardLockRefreshInterval: Config.duration("SHARD_LOCK_REFRESH_INTERVAL").pipe(Config.withDefault("2 seconds")),
  refreshAssignmentsInterval: Config.duration("REFRESH_ASSIGNMENTS_INTERVAL").pipe(Config.withDefault("1 second")),
  runnerHealthCheckInterval: Config.duration("RUNNER_HEALTH_CHECK_INTERVAL").pipe(Config.withDefault("2 seconds")),
  entityMessagePollInterval: Config.duration("ENTITY_MESSAGE_POLL_INTERVAL").pipe(Config.withDefault("1 second")),
  entityMaxIdleTime: Config.duration("ENTITY_MAX_IDLE_TIME").pipe(Config.withDefault("5 minutes")),
  // Encoding and decoding every message to an entity on the same runner (as if it were remote) costs CPU on
  // the hot path; messages between runners are always serialized. Turn on to test serialization locally.
  simulateRemoteSerialization: Config.boolean("SIMULATE_REMOTE_SERIALIZATION").pipe(Config.withDefault(false))
})
export type RunnerConfig = Config.Config.Success<typeof RunnerConfig>
