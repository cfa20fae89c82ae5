import { FetchHttpClient } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { afterAll, describe, expect, layer } from "@effect/vitest"
import { Context, Duration, Effect, Layer, Logger, LogLevel, Metric, Schedule } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { TokenSigner } from "../../src/http/Auth.js"
import { breakerRefused } from "../../src/observability/metrics.js"
import { ProviderBreaker } from "../../src/quota/ProviderBreaker.js"
import * as Redis from "../../src/redis/Redis.js"
import { simulatorEnv } from "../../src/simulator/embedded.js"
import { withSettings as settingsLayer } from "../../src/testing/TestRunner.js"
import { adminClient, runOps } from "../support/admin.js"
import { layerTestDatabase, noDatabase } from "../support/database.js"
import { scaledDuration, services } from "../support/env.js"
import { expectBalanced, ledgers, startTask, statuses, waitForStatus } from "../support/lifecycle.js"
import { freePort, layerTestRunner, quietLogs, withSettings } from "../support/runner.js"
import { layerRunnerHttp, layerSim, Sim } from "../support/simulator.js"
import { uuid } from "../support/tasks.js"

const redisUrl = services.redisUrl
const [httpPort, simPort] = await Effect.runPromise(Effect.all([freePort, freePort]))
const platform = `http://127.0.0.1:${httpPort}`
const sim = `http://127.0.0.1:${simPort}`
const objects = fs.mkdtempSync(path.join(os.tmpdir(), "breaker-objects-"))
afterAll(() => fs.rmSync(objects, { recursive: true, force: true }))
const PROVIDERS = ["runway", "luma"] as const
const prefix = `test-${uuid()}:`
const breakerSettings = {
  BREAKER_MIN_CALLS: "4",
  BREAKER_ERROR_RATE: "0.5",
  BREAKER_WINDOW: "20 seconds",
  // far longer than the few submits the test checks while it is open (a probe is a real call: a submit probe that
  // meets a 503 is a submit of unknown outcome, which the checks of held tasks must not meet)
  BREAKER_OPEN_FOR: "30 seconds",
  BREAKER_OPEN_MAX: "30 seconds",
  BREAKER_PROBES: "1"
}
const settings = {
  ...simulatorEnv(platform, sim, PROVIDERS),
  POLL_INTERVAL_SCALE: "0.05",
  PROVIDER_TIMEOUT: "1 second",
  SUBMIT_UNKNOWN_GRACE: "1 second",
  OBJECT_STORE_DIR: objects,
  REDIS_URL: redisUrl ?? "",
  REDIS_KEY_PREFIX: prefix,
  SWEEP_INTERVAL: "1 second",
  SWEEP_GRACE: "3 seconds",
  ...breakerSettings,
  ...Object.fromEntries(PROVIDERS.map((p) => [`${p.toUpperCase()}_LOOKUP`, "true"]))
}

const TestLayer = layerSim(simPort, platform).pipe(
  Layer.provideMerge(
    layerRunnerHttp(httpPort).pipe(Layer.provideMerge(layerTestRunner(layerTestDatabase(), { lifecycle: true })))
  ),
  Layer.provide(FetchHttpClient.layer),
  Layer.provide(quietLogs),
  Layer.provide(withSettings(settings))
)

/** A second runner's breaker on the same Redis: what it sees is what every runner sees. */
const otherRunnerWith = (overrides: Record<string, string>) =>
  Layer.build(
    ProviderBreaker.Default.pipe(
      Layer.provide(Redis.layer(redisUrl ?? "", prefix)),
      Layer.provide(settingsLayer({ ...breakerSettings, ...overrides })),
      Layer.provide(Logger.minimumLogLevel(LogLevel.Error))
    )
  ).pipe(Effect.map((ctx) => Context.get(ctx, ProviderBreaker)))
const otherRunner = otherRunnerWith({})

const stateOf = (breaker: ProviderBreaker, model: string) =>
  Effect.map(breaker.list, ({ breakers }) => breakers.find((b) => b.provider === "runway" && b.model === model))

/** Polls `effect` until `ok` holds, for at most `within` (scaled). */
const waitFor = <A>(what: string, effect: Effect.Effect<A>, ok: (a: A) => boolean, within = Duration.seconds(30)) =>
  effect.pipe(
    Effect.filterOrFail(ok, () => `still waiting for ${what}`),
    Effect.retry(Schedule.spaced(Duration.millis(100)).pipe(Schedule.upTo(scaledDuration(within))))
  )

/** A task's states once its submit went through. */
const sentOn = ["submitted", "running", "provider_succeeded", "fetching_output", "processing_media", "ready"]

/** Submits of gen4.5 that the runner's breaker refused (the runner is in this process: its metrics are here). */
const refusedSubmits = Metric.value(
  breakerRefused.pipe(
    Metric.tagged("provider", "runway"),
    Metric.tagged("model", "gen4.5"),
    Metric.tagged("call", "submit")
  )
).pipe(Effect.map((s) => s.count))

const keysOf = (taskId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ client_request_id: string }>`SELECT client_request_id FROM task_attempts WHERE task_id = ${taskId}`
  ).pipe(
    Effect.map((rows) => rows.map((r) => r.client_request_id)),
    Effect.orDie
  )

describe.skipIf(noDatabase || redisUrl === undefined)("provider breaker against the simulator", () => {
  layer(TestLayer, { timeout: 180_000, excludeTestServices: true })((it) => {
    it.scoped(
      "one failing model trips only its breaker: its polls and submits stop, other routes finish; it closes after " +
        "the provider recovers and every task finishes, each submitted once",
      () =>
        Effect.gen(function*() {
          const simulator = yield* Sim
          const breaker = yield* otherRunner
          yield* simulator.setFaults({ jobDurationMs: 4000, faultRoutes: [], rate5xx: 0 })
          const failing = yield* Effect.forEach(
            Array.from({ length: 4 }),
            () => startTask("runway", { model: "gen4.5" }),
            { concurrency: 4 }
          )
          yield* waitForStatus(failing.map((t) => t.taskId), ["submitted", "running"], Duration.seconds(30))

          // runway's gen4.5 answers 503 to every submit and query; veo3.1 and luma are fine
          yield* simulator.setFaults({ faultRoutes: ["runway/gen4.5"], rate5xx: 1, jobDurationMs: 3000 })
          const opened = (yield* waitFor("gen4.5's breaker open", stateOf(breaker, "gen4.5"), (b) =>
            b?.state === "open"))!
          expect(opened.source).toBe("redis")
          const faultsAtOpen = { ...simulator.stats.routeFaults }

          // new tasks while it is open: gen4.5's wait unsent, the other routes go through
          const held = yield* Effect.forEach(Array.from({ length: 2 }), () => startTask("runway", { model: "gen4.5" }))
          const others = [
            yield* startTask("runway", { model: "veo3.1" }),
            yield* startTask("runway", { model: "veo3.1" }),
            yield* startTask("luma"),
            yield* startTask("luma")
          ]
          // the other routes' submits go through (seconds); the held ones are refused meanwhile, each counted
          yield* waitForStatus(others.map((t) => t.taskId), sentOn, Duration.seconds(30))
          yield* waitFor("held submits refused", refusedSubmits, (n) => n >= held.length)
          expect((yield* stateOf(breaker, "gen4.5"))?.state, "still within the cool-down").toBe("open")
          expect((yield* stateOf(breaker, "veo3.1"))?.state ?? "closed").toBe("closed")
          // nothing reached gen4.5 since it opened but the calls already in flight then (at most one per task)
          const since = (kind: string) =>
            (simulator.stats.routeFaults[`runway/gen4.5 ${kind}`] ?? 0) - (faultsAtOpen[`runway/gen4.5 ${kind}`] ?? 0)
          expect(since("submit")).toBe(0)
          expect(since("query")).toBeLessThanOrEqual(failing.length)
          // the held tasks wait, queued, never failed, nothing submitted
          expect((yield* statuses(held.map((t) => t.taskId))).map((r) => r.status)).toEqual(["queued", "queued"])
          for (const t of held) {
            for (const key of yield* keysOf(t.taskId)) expect(simulator.submissions(key)).toBe(0)
          }
          expect((yield* statuses(failing.map((t) => t.taskId))).every((r) => r.status !== "failed")).toBe(true)
          // the other model and the other provider finish while gen4.5 fails
          yield* waitForStatus(others.map((t) => t.taskId), ["ready"], Duration.seconds(40))

          // the provider recovers: after the cool-down a probe goes, succeeds, and the breaker closes
          yield* simulator.setFaults({ rate5xx: 0, faultRoutes: [] })
          const all = [...failing, ...held]
          yield* waitForStatus(all.map((t) => t.taskId), ["ready"], Duration.seconds(90))
          expect((yield* stateOf(breaker, "gen4.5"))?.state).toBe("closed")
          // no duplicate submission: one job per task at the simulator, each key submitted once
          for (const t of [...all, ...others]) {
            const keys = yield* keysOf(t.taskId)
            expect(simulator.jobs().filter((j) => keys.includes(j.clientKey)).length).toBe(1)
            for (const key of keys) expect(simulator.submissions(key)).toBeLessThanOrEqual(1)
          }
          expectBalanced(yield* ledgers([...all, ...others].map((t) => t.taskId)), expect)
        }).pipe(
          Effect.ensuring(Effect.flatMap(Sim, (s) => s.setFaults({ rate5xx: 0, faultRoutes: [] })))
        ),
      { timeout: 180_000 }
    )

    it.scoped(
      "an operator lists the breakers and resets one through the admin API; the reset is audited",
      () =>
        Effect.gen(function*() {
          // what it trips stays open for an hour, however slowly the CLI starts
          const breaker = yield* otherRunnerWith({ BREAKER_OPEN_FOR: "1 hour", BREAKER_OPEN_MAX: "1 hour" })
          const route = { provider: "luma", model: "ray-flash-2" }
          for (let i = 0; i < 4; i++) yield* breaker.guard(route, "query", Effect.fail("503"), () => true)
          const client = yield* adminClient(platform, "breaker-test")
          const listed = yield* client.breakers.list()
          expect(listed.breakers.find((b) => b.model === "ray-flash-2")).toMatchObject({ state: "open", calls: 0 })
          const reset = yield* client.breakers.reset({
            payload: { provider: "luma", model: "ray-flash-2", reason: "provider confirmed the incident is over" }
          })
          expect(reset.reset).toEqual([{ provider: "luma", model: "ray-flash-2", from: "open" }])
          expect((yield* breaker.admit(route, "query"))._tag).toBe("Admitted")
          const audit = yield* client.operations.audit()
          expect(audit.changes[0]).toMatchObject({
            operator: "breaker-test",
            what: "breaker.reset luma/ray-flash-2",
            to: "closed",
            reason: "provider confirmed the incident is over"
          })
          // the same through `npm run ops -- breakers` as an operator runs it
          const token = yield* Effect.flatMap(TokenSigner, (t) => t.signOperator("breaker-cli"))
          const ops = { OPS_URL: platform, OPS_TOKEN: token }
          for (let i = 0; i < 4; i++) yield* breaker.guard(route, "query", Effect.fail("503"), () => true)
          const shown = yield* runOps(["breakers"], ops)
          expect(shown.code, shown.stderr).toBe(0)
          expect(shown.stdout).toMatch(/^luma\/ray-flash-2\topen\t/m)
          const cleared = yield* runOps(["breakers", "reset", "--reason", "incident over", "luma", "ray-flash-2"], ops)
          expect(cleared.code, cleared.stderr).toBe(0)
          expect(cleared.stdout).toContain("luma/ray-flash-2\topen → closed")
          expect((yield* breaker.admit(route, "query"))._tag).toBe("Admitted")
          const refused = yield* runOps(["breakers", "reset", "--reason", "x", "nobody"], ops)
          expect(refused.code).toBe(1)
          expect(refused.stderr).toContain("unknown provider nobody")
          // bad input is refused clearly
          const unknown = yield* client.breakers.reset({ payload: { provider: "nobody", reason: "x" } }).pipe(
            Effect.flip
          )
          expect(unknown._tag).toBe("OperationRefused")
          const none = yield* client.breakers.reset({ payload: { provider: "luma", model: "ray-2x", reason: "x" } })
            .pipe(
              Effect.flip
            )
          expect(none._tag).toBe("NotFound")
        }).pipe(Effect.timeout(scaledDuration(Duration.seconds(150)))),
      { timeout: 180_000 }
    )
  })
})
