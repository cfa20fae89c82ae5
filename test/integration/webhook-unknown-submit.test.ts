/**
 * Issue #15 part 4: a submit whose response was lost (the job exists at the provider, the platform never heard its
 * id) is resolved by the provider's own webhook, with lookup off. Replicate's, fal's and Luma's callback URLs name
 * the attempt with an expiring signed token; the webhook binds the job to the attempt and the task reaches the job's
 * real outcome: no second job, no manual review. A forged or expired URL token is refused and changes nothing.
 *
 * The simulator's webhooks reach the runner through a TCP proxy the test holds closed until every task is in
 * `submit_unknown` (the simulator retries refused deliveries, as providers do): that the webhook, not the submit
 * response, resolved each task does not depend on how fast this machine is.
 */
import { FetchHttpClient } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { afterAll, describe, expect, layer } from "@effect/vitest"
import { Duration, Effect, Layer, Metric, MetricState } from "effect"
import { generateKeyPairSync } from "node:crypto"
import * as fs from "node:fs"
import * as http from "node:http"
import * as os from "node:os"
import * as path from "node:path"
import { TaskClient } from "../../src/entities/TaskClient.js"
import { unknownSubmitsResolved } from "../../src/observability/metrics.js"
import { devCallbackTokenSecret, devSecret } from "../../src/providers/devSecrets.js"
import { callbackQuery } from "../../src/providers/signatures.js"
import { simulatorEnv } from "../../src/simulator/embedded.js"
import { layerTestDatabase, noDatabase } from "../support/database.js"
import { scaled } from "../support/env.js"
import { expectBalanced, ledgers, startTask, waitForStatus } from "../support/lifecycle.js"
import { freePort, layerTestRunner, quietLogs, withSettings } from "../support/runner.js"
import { layerRunnerHttp, layerSim, Sim } from "../support/simulator.js"
import { uuid } from "../support/tasks.js"
import { startTcpProxy } from "../support/tcpProxy.js"
import { eventually, falHeaders, openAISigner, post } from "../support/webhooks.js"

const [httpPort, simPort] = await Effect.runPromise(Effect.all([freePort, freePort]))
const sim = `http://127.0.0.1:${simPort}`
const runner = `http://127.0.0.1:${httpPort}`
// what the providers are told: the runner behind a proxy the test can close
const proxy = await startTcpProxy(httpPort)
const platform = `http://127.0.0.1:${proxy.port}`
const objects = fs.mkdtempSync(path.join(os.tmpdir(), "unknown-submit-objects-"))

/** fal's JWKS: the simulator's key, and the test's own (to sign fal webhooks of its own). */
const testFal = generateKeyPairSync("ed25519")
const jwks = http.createServer((_, res) => {
  fetch(`${sim}/fal/.well-known/jwks.json`).then((r) => r.json() as Promise<{ keys: Array<unknown> }>).then(
    ({ keys }) => {
      res.setHeader("content-type", "application/json")
      res.end(JSON.stringify({ keys: [...keys, { ...testFal.publicKey.export({ format: "jwk" }), kid: "test" }] }))
    },
    () => res.writeHead(503).end()
  )
})
await new Promise<void>((resolve) => jwks.listen(0, "127.0.0.1", resolve))

afterAll(async () => {
  fs.rmSync(objects, { recursive: true, force: true })
  await proxy.close()
  await new Promise((resolve) => jwks.close(resolve))
})

const PROVIDERS = ["replicate", "fal", "luma"] as const
const settings = {
  ...simulatorEnv(platform, sim, PROVIDERS),
  FAL_JWKS_URL: `http://127.0.0.1:${(jwks.address() as { port: number }).port}/jwks.json`,
  // lookup by idempotency key off: the simulator-only way of resolving an unknown submit is not there
  ...Object.fromEntries(PROVIDERS.map((p) => [`${p.toUpperCase()}_LOOKUP`, "false"])),
  SUBMIT_UNKNOWN_DEADLINE: "1 hour",
  POLL_INTERVAL_SCALE: "0.05",
  PROVIDER_TIMEOUT: "1 second",
  SUBMIT_UNKNOWN_GRACE: "1 second",
  OBJECT_STORE_DIR: objects,
  REDIS_KEY_PREFIX: `test-${uuid()}:`,
  SWEEP_INTERVAL: "1 second",
  RECONCILE_INTERVAL: "2 seconds"
}

const TestLayer = layerSim(simPort, platform).pipe(
  Layer.provideMerge(
    layerRunnerHttp(httpPort).pipe(Layer.provideMerge(layerTestRunner(layerTestDatabase(), { lifecycle: true })))
  ),
  Layer.provide(FetchHttpClient.layer),
  Layer.provide(quietLogs),
  Layer.provide(withSettings(settings))
)

interface AttemptRow {
  readonly task_id: string
  readonly attempts: number
  readonly client_request_id: string
  readonly provider_task_id: string | null
  readonly status: string
  readonly error_code: string | null
}

const attemptsOf = (ids: ReadonlyArray<string>) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<AttemptRow>`
      SELECT t.id AS task_id, t.status, t.error_code, a.client_request_id, a.provider_task_id,
        (SELECT count(*)::int FROM task_attempts x WHERE x.task_id = t.id) AS attempts
      FROM generation_tasks t JOIN task_attempts a ON a.id = t.current_attempt_id
      WHERE t.id IN ${sql.in(ids)}`).pipe(Effect.orDie)

const historyOf = (taskId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ status: string }>`
      SELECT public_payload->>'status' AS status FROM task_events WHERE task_id = ${taskId} ORDER BY task_version`)
    .pipe(Effect.map((rows) => rows.map((r) => r.status)), Effect.orDie)

const inboxRowsOf = (attemptId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ n: number }>`SELECT count(*)::int AS n FROM provider_callback_inbox WHERE attempt_id = ${attemptId}`
  ).pipe(
    Effect.map((rows) => rows[0]!.n),
    Effect.orDie
  )

const resolvedByWebhook = (provider: string) =>
  Metric.value(Metric.tagged(Metric.tagged(unknownSubmitsResolved, "provider", provider), "via", "webhook")).pipe(
    Effect.map((s: MetricState.MetricState.Counter<number>) => s.count)
  )

const DAY = 24 * 3600

describe.skipIf(noDatabase)("an unknown submit resolved by the provider's own webhook (lookup off)", () => {
  layer(TestLayer, { timeout: scaled(180_000), excludeTestServices: true })((it) => {
    it.effect(
      "each task reaches its job's outcome, one job each, no manual review; bad URL tokens change nothing",
      () =>
        Effect.gen(function*() {
          const simulator = yield* Sim
          const before = yield* Effect.forEach(PROVIDERS, resolvedByWebhook)
          // every job is created and its submit response never arrives; no webhook reaches the runner yet
          proxy.pause()
          yield* simulator.setFaults({
            jobDurationMs: 4000,
            dropWebhooks: 0,
            duplicateWebhooks: 0,
            webhookRetryDelayMs: 3000,
            submitAcceptThenTimeout: 1
          })
          /** Starts one task per provider whose jobs end with `outcome`, and waits until the simulator holds them. */
          const round = (outcome: "succeeded" | "failed") =>
            Effect.gen(function*() {
              yield* simulator.setFaults({ outcomes: { succeeded: 0, failed: 0, canceled: 0, [outcome]: 1 } })
              const tasks = yield* Effect.forEach(PROVIDERS, (p) => startTask(p), { concurrency: 3 })
              yield* eventually(
                attemptsOf(tasks.map((t) => t.taskId)),
                (rows) =>
                  rows.length === tasks.length && rows.every((r) => simulator.submissions(r.client_request_id) > 0),
                Duration.seconds(30)
              )
              return tasks.map((t) => ({ ...t, outcome }))
            })
          const tasks = [...yield* round("succeeded"), ...yield* round("failed")]
          const ids = tasks.map((t) => t.taskId)
          yield* waitForStatus(ids, ["submit_unknown"], Duration.seconds(30))

          // a genuine provider signature on a URL whose token is forged (401) or past CALLBACK_TOKEN_TTL (410)
          const replicate = tasks.find((t) => t.provider === "replicate")!
          const fal = tasks.find((t) => t.provider === "fal")!
          const prediction = JSON.stringify({ id: `replicate-${uuid()}`, status: "succeeded", output: `${sim}/x.mp4` })
          const falBody = JSON.stringify({ request_id: uuid(), status: "OK", payload: { video: { url: `${sim}/x` } } })
          const signReplicate = openAISigner(devSecret("replicate"))
          const query = (attemptId: string, secret: string, issuedAgo: number) =>
            callbackQuery(
              secret,
              attemptId === fal.attemptId ? "fal" : "replicate",
              attemptId,
              new Date(Date.now() - issuedAgo * 1000)
            )
          const falRequestId = (JSON.parse(falBody) as { request_id: string }).request_id
          const send = (attemptId: string, q: string) =>
            (attemptId === replicate.attemptId
              ? post(`${runner}/webhooks/replicate?${q}`, prediction, signReplicate(prediction))
              : post(
                `${runner}/webhooks/fal?${q}`,
                falBody,
                falHeaders(testFal.privateKey, falRequestId, falBody, "sim-user")
              )).pipe(Effect.provide(FetchHttpClient.layer))
          for (const t of [replicate, fal]) {
            expect((yield* send(t.attemptId, query(t.attemptId, "not-our-secret", 0))).status).toBe(401)
            expect(
              (yield* send(
                t.attemptId,
                query(t.attemptId, devCallbackTokenSecret, 0).replace(/token=[^&]*/, "token=AAAA")
              )).status
            ).toBe(401)
            // a token for another provider's URL does not open this one
            const other = callbackQuery(
              devCallbackTokenSecret,
              t === fal ? "replicate" : "fal",
              t.attemptId,
              new Date()
            )
            expect((yield* send(t.attemptId, other)).status).toBe(401)
            expect((yield* send(t.attemptId, query(t.attemptId, devCallbackTokenSecret, DAY + 60))).status).toBe(410)
            expect(yield* inboxRowsOf(t.attemptId)).toBe(0)
          }
          const held = yield* attemptsOf([replicate.taskId, fal.taskId])
          expect(held.map((r) => [r.status, r.provider_task_id])).toEqual([["submit_unknown", null], [
            "submit_unknown",
            null
          ]])

          // the providers' webhooks get through now: each names its attempt, and that resolves it
          proxy.resume()
          yield* waitForStatus(ids, ["ready", "failed"], Duration.seconds(90))

          const jobs = simulator.jobs()
          const rows = yield* attemptsOf(ids)
          for (const t of tasks) {
            const row = rows.find((r) => r.task_id === t.taskId)!
            const job = jobs.filter((j) => j.clientKey === row.client_request_id)
            // exactly one job at the provider, bound to the task's only attempt
            expect(simulator.submissions(row.client_request_id)).toBe(1)
            expect(job.map((j) => j.id)).toEqual([row.provider_task_id])
            expect(row.attempts).toBe(1)
            // the job's real outcome, reached from submit_unknown without a human
            expect([t.provider, row.status, row.error_code]).toEqual(
              t.outcome === "succeeded" ? [t.provider, "ready", null] : [t.provider, "failed", "provider_failed"]
            )
            const history = yield* historyOf(t.taskId)
            expect(history).toContain("submit_unknown")
            expect(history).not.toContain("manual_review")
            // the webhook that resolved it was mapped by the attempt its URL named
            expect(yield* inboxRowsOf(t.attemptId)).toBeGreaterThan(0)
          }
          const after = yield* Effect.forEach(PROVIDERS, resolvedByWebhook)
          expect(after.map((n, i) => n - before[i]!)).toEqual([2, 2, 2])
        }),
      scaled(180_000)
    )

    it.effect(
      "a cancel asked while the submit is unknown: the webhook binds the job, which is then canceled",
      () =>
        Effect.gen(function*() {
          const simulator = yield* Sim
          proxy.pause()
          yield* simulator.setFaults({
            jobDurationMs: 20_000,
            outcomes: { succeeded: 1, failed: 0, canceled: 0 },
            webhookRetryDelayMs: 3000,
            submitAcceptThenTimeout: 1
          })
          const t = yield* startTask("replicate")
          yield* waitForStatus([t.taskId], ["submit_unknown"], Duration.seconds(30))
          const res = yield* (yield* TaskClient).send(t.taskId, (c) => c.Cancel({ traceId: "test" }))
          expect(res.task.status).toBe("cancel_requested")
          // Replicate's "start" webhook names the attempt: the job is known, and the cancel reaches it
          proxy.resume()
          yield* waitForStatus([t.taskId], ["canceled"], Duration.seconds(60))
          const [row] = yield* attemptsOf([t.taskId])
          const jobs = simulator.jobs().filter((j) => j.clientKey === row!.client_request_id)
          expect(jobs.map((j) => [j.id, j.canceledAt !== null])).toEqual([[row!.provider_task_id, true]])
          expect([row!.attempts, row!.error_code]).toEqual([1, null])
          expect(yield* historyOf(t.taskId)).not.toContain("manual_review")
          expectBalanced(yield* ledgers([t.taskId]), expect)
        }),
      scaled(120_000)
    )
  })
})
