import { FetchHttpClient } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { afterAll, describe, expect, layer } from "@effect/vitest"
import { Duration, Effect, Layer } from "effect"
import { createHash } from "node:crypto"
import * as fs from "node:fs"
import * as http from "node:http"
import * as os from "node:os"
import * as path from "node:path"
import { devSecret } from "../../src/providers/devSecrets.js"
import { callbackQuery } from "../../src/providers/signatures.js"
import { simulatorEnv } from "../../src/simulator/embedded.js"
import { sampleMp4 } from "../../src/simulator/sampleMp4.js"
import { layerTestDatabase, noDatabase } from "../support/database.js"
import { scaled } from "../support/env.js"
import { startTask, statuses, waitForStatus } from "../support/lifecycle.js"
import { freePort, layerTestRunner, quietLogs, withSettings } from "../support/runner.js"
import { layerRunnerHttp, layerSim, Sim } from "../support/simulator.js"
import { uuid } from "../support/tasks.js"
import { eventually, openAISigner, post } from "../support/webhooks.js"

/** A server on loopback that counts what it is asked and answers every GET with a valid MP4 of its own. */
const listen = (handler: http.RequestListener) =>
  new Promise<{ server: http.Server; port: number }>((resolve) => {
    const server = http.createServer(handler)
    server.listen(0, "127.0.0.1", () => resolve({ server, port: (server.address() as { port: number }).port }))
  })
const attackerVideo = sampleMp4(7)
const attackerRequests: Array<string> = []
const attacker = await listen((req, res) => {
  attackerRequests.push(req.url ?? "")
  res.writeHead(200, { "content-type": "video/mp4", "content-length": attackerVideo.length })
  res.end(attackerVideo)
})
// an allowed output host that redirects: `/to/<url>` answers 302 to <url>
const cdnRequests: Array<string> = []
const cdn = await listen((req, res) => {
  cdnRequests.push(req.url ?? "")
  res.writeHead(302, { location: decodeURIComponent((req.url ?? "").replace(/^\/to\//, "")) })
  res.end()
})
afterAll(() => {
  attacker.server.close()
  cdn.server.close()
})

const [httpPort, simPort] = await Effect.runPromise(Effect.all([freePort, freePort]))
const platform = `http://127.0.0.1:${httpPort}`
const sim = `http://127.0.0.1:${simPort}`
const objects = fs.mkdtempSync(path.join(os.tmpdir(), "ssrf-objects-"))
afterAll(() => fs.rmSync(objects, { recursive: true, force: true }))
const TOKEN_SECRET = "test-callback-secret"
const PROVIDERS = ["luma", "replicate"] as const
const settings = {
  ...simulatorEnv(platform, sim, PROVIDERS),
  POLL_INTERVAL_SCALE: "0.05",
  PROVIDER_TIMEOUT: "1 second",
  OBJECT_STORE_DIR: objects,
  OUTPUT_DOWNLOAD_TIMEOUT: "5 seconds",
  REDIS_KEY_PREFIX: `test-${uuid()}:`,
  CALLBACK_TOKEN_SECRET: TOKEN_SECRET,
  ...Object.fromEntries(PROVIDERS.map((p) => [`${p.toUpperCase()}_LOOKUP`, "true"])),
  // Replicate's outputs may also come from the test's redirector, from `localhost` at the attacker's port and from
  // the metadata address: allowed hosts all, so that only the address check can refuse them
  REPLICATE_OUTPUT_HOSTS: `127.0.0.1:${simPort},127.0.0.1:${cdn.port},localhost:${attacker.port},169.254.169.254`,
  OUTPUT_PRIVATE_HOSTS: `127.0.0.1:${simPort},127.0.0.1:${cdn.port}`
}

const TestLayer = layerSim(simPort, platform).pipe(
  Layer.provideMerge(
    layerRunnerHttp(httpPort).pipe(
      Layer.provideMerge(layerTestRunner(layerTestDatabase(), { lifecycle: true }))
    )
  ),
  // the test posts callbacks with it too
  Layer.provideMerge(FetchHttpClient.layer),
  Layer.provide(quietLogs),
  Layer.provide(withSettings(settings))
)

/** The task's attempt once the provider has accepted it: its provider task id. */
const acceptedAttempt = (attemptId: string) =>
  eventually(
    Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql<{ provider_task_id: string | null }>`
        SELECT provider_task_id FROM task_attempts WHERE id = ${attemptId}`),
    (rows) => rows[0]?.provider_task_id != null,
    Duration.seconds(20)
  ).pipe(Effect.map((rows) => rows[0]!.provider_task_id!))

const statusHistory = (taskId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ status: string }>`
      SELECT public_payload->>'status' AS status FROM task_events WHERE task_id = ${taskId} ORDER BY task_version`)
    .pipe(Effect.map((rows) => rows.map((r) => r.status)), Effect.orDie)

const task = (taskId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ status: string; error_code: string | null }>`
      SELECT status, error_code FROM generation_tasks WHERE id = ${taskId}`).pipe(
      Effect.map((rows) => rows[0]!),
      Effect.orDie
    )

const signReplicate = openAISigner(devSecret("replicate"))

/** A signed Replicate webhook: the prediction succeeded with `output`. */
const replicateSucceeded = (predictionId: string, output: string) => {
  const body = JSON.stringify({
    id: predictionId,
    status: "succeeded",
    output,
    completed_at: new Date().toISOString()
  })
  return post(`${platform}/webhooks/replicate`, body, signReplicate(body))
}

const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex")

describe.skipIf(noDatabase)("output URLs: no SSRF, no injected outputs", () => {
  layer(TestLayer, { timeout: scaled(120_000), excludeTestServices: true })((it) => {
    it.effect(
      "an unsigned Luma callback claiming completion at a loopback URL: nothing fetched, the task runs on to the provider's own output",
      () =>
        Effect.gen(function*() {
          const simulator = yield* Sim
          // the simulator's own callbacks are dropped: only polls (and the test's callback) reach the runner
          yield* simulator.setFaults({ jobDurationMs: scaled(8000), dropWebhooks: 1 })
          const t = yield* startTask("luma")
          const generationId = yield* acceptedAttempt(t.attemptId)
          yield* waitForStatus([t.taskId], ["running"], Duration.seconds(20))

          const body = JSON.stringify({
            id: generationId,
            state: "completed",
            assets: { video: `http://127.0.0.1:${attacker.port}/internal` }
          })
          const query = callbackQuery(TOKEN_SECRET, "luma", t.attemptId, new Date())
          const res = yield* post(`${platform}/webhooks/luma?${query}`, body, {})
          expect(res.status).toBe(204)
          const sql = yield* SqlClient.SqlClient
          // processed: the entity has answered for it
          yield* eventually(
            sql<{ process_status: string }>`
              SELECT process_status FROM provider_callback_inbox
              WHERE attempt_id = ${t.attemptId} AND payload->>'state' = 'completed'`,
            (rows) => rows[0]?.process_status === "processed"
          )
          // the job is still running at the provider, so the claim cannot have been confirmed
          const job = simulator.jobs().find((j) => j.id === generationId)!
          expect(Date.now()).toBeLessThan(job.createdAt + job.durationMs)
          expect((yield* task(t.taskId)).status).toBe("running")

          // the job finishes at the provider: ready, with the provider's output
          const [row] = yield* waitForStatus([t.taskId], ["ready"], Duration.seconds(60))
          expect(attackerRequests).toEqual([])
          const stored = fs.readFileSync(path.join(objects, row!.asset_id!))
          expect(sha256(stored)).not.toBe(sha256(attackerVideo))
          expect(yield* statusHistory(t.taskId)).not.toContain("failed")
        })
    )

    it.effect("a signed output URL whose host resolves to loopback is refused: nothing fetched, output_unavailable", () =>
      Effect.gen(function*() {
        const simulator = yield* Sim
        yield* simulator.setFaults({ jobDurationMs: scaled(30_000), dropWebhooks: 1 })
        const t = yield* startTask("replicate")
        const predictionId = yield* acceptedAttempt(t.attemptId)
        const before = attackerRequests.length
        // `localhost` is an allowed host here; it resolves to 127.0.0.1, which no real provider's output may be on
        expect((yield* replicateSucceeded(predictionId, `http://localhost:${attacker.port}/v.mp4`)).status).toBe(204)
        yield* waitForStatus([t.taskId], ["failed"], Duration.seconds(30))
        expect(yield* task(t.taskId)).toEqual({ status: "failed", error_code: "output_unavailable" })
        expect(attackerRequests.length - before).toBe(0)
      }))

    it.effect("a redirect from an allowed host to a private or metadata address is refused", () =>
      Effect.gen(function*() {
        const simulator = yield* Sim
        yield* simulator.setFaults({ jobDurationMs: scaled(30_000), dropWebhooks: 1 })
        const [toLoopback, toMetadata] = yield* Effect.all([startTask("replicate"), startTask("replicate")])
        const before = { attacker: attackerRequests.length, cdn: cdnRequests.length }
        const redirect = (target: string) => `http://127.0.0.1:${cdn.port}/to/${encodeURIComponent(target)}`
        const targets = [
          [toLoopback, `http://localhost:${attacker.port}/internal`],
          [toMetadata, "http://169.254.169.254/latest/meta-data/"]
        ] as const
        for (const [t, target] of targets) {
          const predictionId = yield* acceptedAttempt(t.attemptId)
          expect((yield* replicateSucceeded(predictionId, redirect(target))).status).toBe(204)
        }
        const ids = [toLoopback.taskId, toMetadata.taskId]
        yield* waitForStatus(ids, ["failed"], Duration.seconds(30))
        expect((yield* statuses(ids)).map((r) => r.status)).toEqual(["failed", "failed"])
        for (const id of ids) expect((yield* task(id)).error_code).toBe("output_unavailable")
        // the allowed host was asked (once per task), the address it pointed to never
        expect(cdnRequests.length - before.cdn).toBe(2)
        expect(attackerRequests.length - before.attacker).toBe(0)
      }))
  })
})
