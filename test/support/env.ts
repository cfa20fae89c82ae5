import { Duration } from "effect"

/**
 * The tests' config layer: the one place test code reads the environment. It names the services a run may use
 * (DATABASE_URL, REDIS_URL, ROCKETMQ_ENDPOINTS, CHROMIUM_PATH, PROMETHEUS_PATH), whether this is CI (where a missing service fails the
 * run instead of skipping its tests), vitest's pool id, and the one factor every timeout guarding a test is scaled
 * by. Tests configure the code under test with ConfigProviders (src/testing/TestRunner.ts `withSettings`), never by
 * writing the environment; the vitest configs read the time factor from here too.
 */
const env: Readonly<Record<string, string | undefined>> = process.env

export const isCI = env.CI === "true"

/** Fails the run in CI when a service it must test against is not configured; locally the tests are skipped. */
const required = (name: string, what: string): string | undefined => {
  const value = env[name]
  if (value === undefined && isCI) throw new Error(`CI=true but ${name} is unset: ${what} must not be skipped in CI`)
  return value
}

export const services = {
  get databaseUrl() {
    return required("DATABASE_URL", "database tests")
  },
  get redisUrl() {
    return required("REDIS_URL", "Redis tests")
  },
  get rocketmqEndpoints() {
    return required("ROCKETMQ_ENDPOINTS", "RocketMQ tests")
  },
  chromiumPath: env.CHROMIUM_PATH ?? "/usr/bin/chromium",
  /** Debian's prometheus (.ci/run installs it); PROMETHEUS_PATH elsewhere */
  prometheusPath: env.PROMETHEUS_PATH ?? "/usr/bin/prometheus"
}

/** vitest's pool id: unique among the workers running at once (ports.ts gives each its own block). */
export const poolId = Number(env.VITEST_POOL_ID ?? "0")

/**
 * Every process a test starts carries this mark in its environment. The suite's global teardown
 * (test/support/globalSetup.ts) kills whatever still carries it, so a runner outlives neither a test that timed out
 * nor a worker that was killed.
 */
export const TEST_PROCESS_MARK = "TCP_TEST_PROCESS"

/**
 * TEST_TIME_FACTOR (default 1; a slow or shared CI machine may set 2) multiplies every timeout that guards a test:
 * vitest's test and hook timeouts, `until`/`eventually`/`waitForStatus` deadlines, `withTimeout`. It never changes
 * what a test asserts, only how long it waits for it.
 */
export const timeFactor = (() => {
  const f = Number(env.TEST_TIME_FACTOR ?? "1")
  if (!Number.isFinite(f) || f <= 0) {
    throw new Error(`TEST_TIME_FACTOR must be a positive number, got ${env.TEST_TIME_FACTOR}`)
  }
  return f
})()

export const scaled = (ms: number) => Math.round(ms * timeFactor)
export const scaledDuration = (d: Duration.DurationInput) => Duration.millis(scaled(Duration.toMillis(d)))

/**
 * The environment of a runner process a test starts: PATH and HOME from this one (node and tsx need them), none of
 * the service URLs unless the test passes them, then `settings`.
 */
export const processEnv = (settings: Record<string, string>): Record<string, string> => {
  const base: Record<string, string> = {}
  for (const name of ["PATH", "HOME", "TMPDIR", "NODE_OPTIONS", "TEST_TIME_FACTOR"]) {
    const value = env[name]
    if (value !== undefined) base[name] = value
  }
  return { ...base, ...settings }
}
