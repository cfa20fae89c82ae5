import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Duration, Effect, Layer, Redacted, Schedule } from "effect"
import { generateKeyPairSync } from "node:crypto"
import { CallbackInbox } from "../../src/intake/CallbackInbox.js"
import { layerPostgres } from "../../src/persistence/Database.js"
import { callbackToken } from "../../src/providers/signatures.js"
import { layerHttpTest } from "../../src/testing/TestRunner.js"
import { databaseUrl, makeTestDatabaseUrl, noDatabase } from "../support/database.js"
import { scaled, scaledDuration } from "../support/env.js"
import { layerTestRunner, quietLogs, withSettings } from "../support/runner.js"
import { admitTask, uuid } from "../support/tasks.js"
import { startTcpProxy } from "../support/tcpProxy.js"
import {
  eventually,
  falHeaders,
  inboxRows,
  nowSeconds,
  OPENAI_TEST_SECRET,
  openaiEvent,
  openAISigner,
  post,
  serveFalJwks,
  submittedTask,
  taskRow
} from "../support/webhooks.js"

const OPENAI_PREVIOUS = "whsec_" + Buffer.from("openai-old-secret-32-bytes-long!!").toString("base64")
const TOKEN_SECRET = "callback-token-secret"
const fal = generateKeyPairSync("ed25519")

const settings = {
  OPENAI_WEBHOOK_SECRET: OPENAI_TEST_SECRET,
  OPENAI_WEBHOOK_SECRET_PREVIOUS: OPENAI_PREVIOUS,
  CALLBACK_TOKEN_SECRET: TOKEN_SECRET,
  FAL_USER_ID: "user-1",
  FAL_JWKS_URL: await serveFalJwks(fal.publicKey),
  WEBHOOK_MAX_BYTES: "4096",
  INBOX_SWEEP_INTERVAL: "200 millis"
}

// the runner reaches PostgreSQL through a proxy the test can cut
const proxy = noDatabase ? null : await startTcpProxy(Number(new URL(databaseUrl!).port || 5432))
const database = Layer.unwrapScoped(Effect.map(makeTestDatabaseUrl, ({ url }) => {
  const proxied = new URL(url)
  proxied.hostname = "127.0.0.1"
  proxied.port = String(proxy!.port)
  return layerPostgres({ url: Redacted.make(proxied.toString()), maxConnections: 10, applicationName: "webhooks" })
}))

const TestLayer = layerHttpTest.pipe(
  Layer.provideMerge(layerTestRunner(database)),
  Layer.provide(quietLogs),
  Layer.provide(withSettings(settings))
)

const signOpenAI = openAISigner(OPENAI_TEST_SECRET)

describe.skipIf(noDatabase)("webhook gateway and inbox on a runner", () => {
  layer(TestLayer, { timeout: scaled(120_000), excludeTestServices: true })((it) => {
    it.effect("a valid webhook is 204 after it is stored, and the task changes through the inbox", () =>
      Effect.gen(function*() {
        const videoId = `video_${uuid()}`
        const { taskId } = yield* submittedTask("openai", videoId)
        const body = openaiEvent(videoId)
        const res = yield* post("/webhooks/openai", body, signOpenAI(body))
        expect(res.status).toBe(204)
        const row = yield* eventually(taskRow(taskId), (t) => t.status === "provider_succeeded")
        expect(row.version).toBe(2)
        const sql = yield* SqlClient.SqlClient
        // the row is marked processed once the entity has answered, a moment after the task changed
        const [inbox] = yield* eventually(
          sql<{ process_status: string; signature_key_version: string }>`
            SELECT process_status, signature_key_version FROM provider_callback_inbox
            WHERE provider_task_id = ${videoId}`,
          (rows) => rows[0]?.process_status === "processed"
        )
        expect(inbox).toEqual({ process_status: "processed", signature_key_version: "current" })
      }))

    it.effect("a storm of 100 identical webhooks stores one row and changes the task once", () =>
      Effect.gen(function*() {
        const videoId = `video_${uuid()}`
        const { taskId } = yield* submittedTask("openai", videoId)
        const body = openaiEvent(videoId)
        const headers = signOpenAI(body)
        const before = yield* inboxRows("openai")
        const results = yield* Effect.forEach(
          Array.from({ length: 100 }),
          () => post("/webhooks/openai", body, headers),
          { concurrency: 32 }
        )
        expect(new Set(results.map((r) => r.status))).toEqual(new Set([204]))
        expect((yield* inboxRows("openai")) - before).toBe(1)
        yield* eventually(taskRow(taskId), (t) => t.status === "provider_succeeded")
        const sql = yield* SqlClient.SqlClient
        const events = yield* sql`SELECT 1 FROM task_events WHERE task_id = ${taskId}`
        expect(events).toHaveLength(2) // created + provider_succeeded
      }))

    it.effect("the previous key is accepted during rotation and recorded", () =>
      Effect.gen(function*() {
        const videoId = `video_${uuid()}`
        const body = openaiEvent(videoId)
        expect((yield* post("/webhooks/openai", body, signOpenAI(body, { secret: OPENAI_PREVIOUS }))).status).toBe(204)
        const sql = yield* SqlClient.SqlClient
        const [row] = yield* sql<{ signature_key_version: string }>`
          SELECT signature_key_version FROM provider_callback_inbox WHERE provider_task_id = ${videoId}`
        expect(row?.signature_key_version).toBe("previous")
      }))

    it.effect("forged, stale, replayed-late, oversized, malformed and mistyped requests store nothing", () =>
      Effect.gen(function*() {
        const before = yield* inboxRows("openai")
        const body = openaiEvent(`video_${uuid()}`)
        const forged = yield* post("/webhooks/openai", body, signOpenAI(body, { secret: "whsec_" + "A".repeat(44) }))
        // no detail for a forger: the body names only the request's trace id
        expect(forged.status).toBe(401)
        expect(Object.keys(JSON.parse(forged.text))).toEqual(["trace_id"])
        const stale = yield* post("/webhooks/openai", body, signOpenAI(body, { ts: nowSeconds() - 600 }))
        expect(stale.status).toBe(401)
        // a captured valid request replayed after the window
        const captured = signOpenAI(body, { ts: nowSeconds() - 301 })
        expect((yield* post("/webhooks/openai", body, captured)).status).toBe(401)
        // tampered body under a valid signature
        expect((yield* post("/webhooks/openai", body.replace("video_", "video_x"), signOpenAI(body))).status).toBe(401)
        const big = JSON.stringify({ pad: "x".repeat(5000) })
        expect((yield* post("/webhooks/openai", big, signOpenAI(big))).status).toBe(413)
        const notJson = "{not json"
        expect((yield* post("/webhooks/openai", notJson, signOpenAI(notJson))).status).toBe(400)
        const wrongShape = JSON.stringify({ id: "evt_1", type: "video.exploded", data: {} })
        const shape = yield* post("/webhooks/openai", wrongShape, signOpenAI(wrongShape))
        expect(shape.status).toBe(400)
        expect(shape.text).toContain("malformed")
        expect((yield* post("/webhooks/openai", body, signOpenAI(body), "text/plain")).status).toBe(415)
        expect((yield* post("/webhooks/nope", body, signOpenAI(body))).status).toBe(404)
        expect((yield* post("/webhooks/runway", body, signOpenAI(body))).status).toBe(404) // polling only
        expect(yield* inboxRows("openai")).toBe(before)
      }))

    it.effect("fal.ai: Ed25519 over the JWKS; Luma: the attempt's URL token", () =>
      Effect.gen(function*() {
        const requestId = `req-${uuid()}`
        const { taskId } = yield* submittedTask("fal", requestId)
        const body = JSON.stringify({
          request_id: requestId,
          status: "OK",
          payload: { video: { url: "https://x/v.mp4" } }
        })
        const signed = falHeaders(fal.privateKey, requestId, body)
        expect((yield* post("/webhooks/fal", body, signed)).status).toBe(204)
        expect((yield* post("/webhooks/fal", body, { ...signed, "x-fal-webhook-user-id": "user-2" })).status)
          .toBe(401)
        yield* eventually(taskRow(taskId), (t) => t.status === "provider_succeeded")
        // the signature covers the request id in the headers: a body about another request is refused
        const otherBody = JSON.stringify({ request_id: `req-${uuid()}`, status: "OK", payload: {} })
        expect((yield* post("/webhooks/fal", otherBody, falHeaders(fal.privateKey, requestId, otherBody))).status)
          .toBe(401)

        const generationId = `gen-${uuid()}`
        const luma = yield* submittedTask("luma", generationId)
        const generation = JSON.stringify({ id: generationId, state: "dreaming" })
        const issued = nowSeconds()
        const url = (token: string) => `/webhooks/luma?attempt=${luma.attemptId}&issued=${issued}&token=${token}`
        const token = callbackToken(TOKEN_SECRET, "luma", luma.attemptId, issued)
        expect((yield* post(url("forged"), generation, {})).status).toBe(401)
        expect((yield* post(url(token), generation, {})).status).toBe(204)
        yield* eventually(taskRow(luma.taskId), (t) => t.status === "running")
        // the body is unsigned: with a valid token it still cannot speak for another generation
        const hijack = JSON.stringify({ id: `gen-${uuid()}`, state: "completed", assets: { video: "https://evil/x" } })
        expect((yield* post(url(token), hijack, {})).status).toBe(204)
        const sql = yield* SqlClient.SqlClient
        yield* eventually(
          sql<{ process_status: string; last_error_code: string | null }>`
            SELECT process_status, last_error_code FROM provider_callback_inbox
            WHERE attempt_id = ${luma.attemptId} AND payload->>'state' = 'completed'`,
          (r) => r[0]?.process_status === "dead" && r[0]?.last_error_code === "attempt_mismatch"
        )
        expect((yield* taskRow(luma.taskId)).status).toBe("running")
      }))

    it.effect("a callback that beats the submit response waits as an orphan, then applies", () =>
      Effect.gen(function*() {
        const videoId = `video_${uuid()}`
        const { attemptId, taskId } = yield* admitTask({ provider: "openai" })
        const body = openaiEvent(videoId)
        expect((yield* post("/webhooks/openai", body, signOpenAI(body))).status).toBe(204)
        const sql = yield* SqlClient.SqlClient
        const statusOf = sql<{ process_status: string }>`
          SELECT process_status FROM provider_callback_inbox WHERE provider_task_id = ${videoId}`
        yield* eventually(statusOf, (r) => r[0]?.process_status === "retry")
        // the submit response lands: the attempt learns its provider id
        yield* sql`UPDATE task_attempts SET provider_task_id = ${videoId}, submit_state = 'SUBMITTED'
                   WHERE id = ${attemptId}`
        yield* sql`UPDATE provider_callback_inbox SET next_retry_at = now() WHERE provider_task_id = ${videoId}`
        yield* eventually(taskRow(taskId), (t) => t.status === "provider_succeeded")
      }))

    it.effect("valid JSON that jsonb cannot hold (\\u0000, lone surrogates) is still stored and processed", () =>
      Effect.gen(function*() {
        const videoId = `video_${uuid()}`
        const { taskId } = yield* submittedTask("openai", videoId)
        const body =
          `{"id":"evt_${uuid()}","object":"event","note":"nul \\u0000 and \\ud800","created_at":${nowSeconds()},` +
          `"type":"video.completed","data":{"id":"${videoId}"}}`
        expect((yield* post("/webhooks/openai", body, signOpenAI(body))).status).toBe(204)
        yield* eventually(taskRow(taskId), (t) => t.status === "provider_succeeded")
        const sql = yield* SqlClient.SqlClient
        const [row] = yield* sql<{ payload: unknown; body: string }>`
          SELECT payload, body FROM provider_callback_inbox WHERE provider_task_id = ${videoId}`
        expect(row).toEqual({ payload: null, body })
      }))

    it.effect("processed bodies are forgotten after the retention period; the row and its dedup key stay", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const [oldKey, newKey] = [`old-${uuid()}`, `new-${uuid()}`]
        yield* sql`INSERT INTO provider_callback_inbox (provider, dedup_key, payload_hash, body, process_status,
                     processed_at, next_retry_at)
                   VALUES ('openai', ${oldKey}, '\\x00', '{"url":"https://tmp"}', 'processed', now() - interval '8 days', NULL),
                          ('openai', ${newKey}, '\\x00', '{"url":"https://tmp"}', 'processed', now(), NULL)`
        expect(yield* (yield* CallbackInbox).forgetBodies(Duration.days(7))).toBeGreaterThanOrEqual(1)
        const rows = yield* sql<{ dedup_key: string; body: string | null }>`
          SELECT dedup_key, body FROM provider_callback_inbox WHERE dedup_key IN (${oldKey}, ${newKey})
          ORDER BY dedup_key DESC`
        expect(rows).toEqual([{ dedup_key: oldKey, body: null }, {
          dedup_key: newKey,
          body: "{\"url\":\"https://tmp\"}"
        }])
      }))

    it.effect("an unreadable stored row goes to the dead letter with its reason", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const key = `poison-${uuid()}`
        yield* sql`INSERT INTO provider_callback_inbox (provider, dedup_key, payload_hash, payload)
                   VALUES ('openai', ${key}, '\\x00', '{"type":"nonsense"}')`
        const rows = yield* eventually(
          sql<{ process_status: string; last_error_code: string }>`
            SELECT process_status, last_error_code FROM provider_callback_inbox WHERE dedup_key = ${key}`,
          (r) => r[0]?.process_status === "dead"
        )
        expect(rows[0]!.last_error_code).toBe("unreadable")
      }))

    it.effect("PostgreSQL unreachable: 503 so the provider retries; back again: the retry is stored", () =>
      Effect.gen(function*() {
        const body = openaiEvent(`video_${uuid()}`)
        const headers = signOpenAI(body)
        proxy!.pause()
        const down = yield* post("/webhooks/openai", body, headers)
        proxy!.resume()
        expect(down.status).toBe(503)
        const retried = yield* post("/webhooks/openai", body, headers).pipe(
          Effect.filterOrFail((r) => r.status === 204, () => "not yet"),
          Effect.retry(Schedule.spaced(Duration.millis(250)).pipe(Schedule.upTo(scaledDuration(Duration.seconds(20))))),
          Effect.orDie
        )
        expect(retried.status).toBe(204)
      }))
  })
})
