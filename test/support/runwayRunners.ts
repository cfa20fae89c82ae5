import { FetchHttpClient } from "@effect/platform"
import { afterAll } from "@effect/vitest"
import { Context, Effect, Layer, Redacted } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { layerPostgres } from "../../src/persistence/Database.js"
import { layerStores } from "../../src/runners/Runner.js"
import { simulatorOutputHosts } from "../../src/simulator/embedded.js"
import { makeTestDatabaseUrl } from "./database.js"
import { services } from "./env.js"
import { freePort, quietLogs } from "./runner.js"
import { layerSim } from "./simulator.js"

/**
 * What the process tests of polling across runner processes share (poll handoff, drain, idle handoff): a fresh
 * database whose URL the runners get, its stores for the test's own reads, the provider simulator, and the settings
 * of a runner polling Runway on that simulator.
 */
export class DbUrl extends Context.Tag("DbUrl")<DbUrl, string>() {}

const DbUrlLive = Layer.scoped(DbUrl, Effect.map(makeTestDatabaseUrl, ({ url }) => url))
const StoresLive = Layer.unwrapEffect(
  Effect.map(
    DbUrl,
    (url) => layerStores(layerPostgres({ url: Redacted.make(url), maxConnections: 4, applicationName: "test" }))
  )
)

/** The database, its stores and the simulator on `simPort`. */
export const layerRunwayFixture = (simPort: number) =>
  Layer.mergeAll(layerSim(simPort, null), StoresLive.pipe(Layer.provideMerge(DbUrlLive))).pipe(
    Layer.provide(FetchHttpClient.layer),
    Layer.provide(quietLogs)
  )

/**
 * A runner process polling Runway (polling only, lookup on) on the simulator at `sim`: quotas in Redis when the run
 * has it (under its own key prefix), propagation in process (the broker may be restarted by another test), the
 * sweeper every second. Each test adds its poll cadence and what it is about.
 */
export const runwayRunnerEnv = (o: {
  readonly databaseUrl: string
  readonly httpPort: number
  readonly runnerPort: number
  readonly sim: string
  readonly objects: string
  readonly keyPrefix: string
}): Record<string, string> => ({
  DATABASE_URL: o.databaseUrl,
  ...(services.redisUrl === undefined ? {} : { REDIS_URL: services.redisUrl, REDIS_KEY_PREFIX: o.keyPrefix }),
  HTTP_PORT: String(o.httpPort),
  RUNNER_PORT: String(o.runnerPort),
  RUNWAY_BASE_URL: `${o.sim}/runway`,
  ...simulatorOutputHosts(o.sim, ["runway"]),
  RUNWAY_LOOKUP: "true",
  OBJECT_STORE_DIR: o.objects,
  ROCKETMQ_ENDPOINTS: "",
  PROVIDER_TIMEOUT: "10 seconds",
  SWEEP_INTERVAL: "1 second",
  SWEEP_GRACE: "2 seconds",
  LOG_LEVEL: "WARN"
})

/**
 * Free ports for the simulator and two runner processes A and B (HTTP and cluster), A's and B's addresses as the
 * runner list names them, the simulator's URL, and a Redis key prefix of the test file's own.
 */
export const twoRunnerPorts = async () => {
  const [simPort, httpA, runnerA, httpB, runnerB] = await Effect.runPromise(
    Effect.all([freePort, freePort, freePort, freePort, freePort])
  )
  return {
    simPort,
    httpA,
    runnerA,
    httpB,
    runnerB,
    A: `127.0.0.1:${runnerA}`,
    B: `127.0.0.1:${runnerB}`,
    sim: `http://127.0.0.1:${simPort}`,
    keyPrefix: `test-${crypto.randomUUID().slice(0, 8)}:`
  }
}

/** A temporary folder (a runner's object store), removed after the test file's tests. */
export const tempFolder = (name: string) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `${name}-`))
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }))
  return dir
}
