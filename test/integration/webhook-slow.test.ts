import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as http from "node:http"
import { layerTestDatabase, noDatabase } from "../support/database.js"
import { scaled } from "../support/env.js"
import { chunkedPost, rawRequest } from "../support/rawHttp.js"
import { freePort, layerTestRunner, quietLogs, withSettings } from "../support/runner.js"
import { layerRunnerHttp } from "../support/simulator.js"
import { uuid } from "../support/tasks.js"
import { nowSeconds, OPENAI_TEST_SECRET, openaiEvent, openAISigner } from "../support/webhooks.js"

const READ_TIMEOUT_MS = 1000
const JWKS_TIMEOUT_MS = 1000

// fal's JWKS endpoint, hanging: it takes the request and never answers
const hanging = http.createServer(() => {})
await new Promise<void>((resolve) => hanging.listen(0, "127.0.0.1", resolve))
const httpPort = await Effect.runPromise(freePort)

const TestLayer = layerRunnerHttp(httpPort).pipe(
  Layer.provideMerge(layerTestRunner(layerTestDatabase())),
  Layer.provide(quietLogs),
  Layer.provide(withSettings({
    OPENAI_WEBHOOK_SECRET: OPENAI_TEST_SECRET,
    FAL_USER_ID: "user-1",
    FAL_JWKS_URL: `http://127.0.0.1:${(hanging.address() as { port: number }).port}/jwks.json`,
    FAL_JWKS_TIMEOUT: `${JWKS_TIMEOUT_MS} millis`,
    WEBHOOK_MAX_BYTES: "4096",
    WEBHOOK_READ_TIMEOUT: `${READ_TIMEOUT_MS} millis`,
    HTTP_PORT: String(httpPort)
  }))
)

const signOpenAI = openAISigner(OPENAI_TEST_SECRET)
const head = (path: string, headers: Record<string, string>) =>
  `POST ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\n` +
  Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join("") + "\r\n"

// the answer is due at the read timeout; this is what the test allows beyond it (scheduling on a busy machine)
const margin = 2000

describe.skipIf(noDatabase)("webhook reads are bounded in time and size", () => {
  layer(TestLayer, { timeout: scaled(60_000), excludeTestServices: true })((it) => {
    it.effect("a body declared as 100 bytes that sends 5 is answered 408 at the read timeout, and closed", () =>
      Effect.gen(function*() {
        const outcome = yield* rawRequest({
          port: httpPort,
          head: head("/webhooks/openai", { "content-type": "application/json", "content-length": "100" }),
          parts: ["{\"id\""]
        }).pipe(Effect.timeout(scaled(READ_TIMEOUT_MS + margin)))
        expect(outcome.status).toBe(408)
        expect(outcome.answeredAfterMs!).toBeGreaterThanOrEqual(READ_TIMEOUT_MS - 50)
      }))

    it.effect("a trickled body is cut at the read timeout, not at its last byte", () =>
      Effect.gen(function*() {
        const body = openaiEvent(`video_${uuid()}`)
        // one byte every 50 ms: the whole body would take several times the read timeout
        const outcome = yield* rawRequest({
          port: httpPort,
          head: head("/webhooks/openai", {
            "content-type": "application/json",
            "content-length": String(body.length),
            ...signOpenAI(body)
          }),
          parts: body.split(""),
          everyMs: 50
        }).pipe(Effect.timeout(scaled(READ_TIMEOUT_MS + margin)))
        expect(body.length * 50).toBeGreaterThan(3 * READ_TIMEOUT_MS)
        expect(outcome.status).toBe(408)
      }))

    it.effect("a chunked body over the limit is answered 413, not reset", () =>
      Effect.gen(function*() {
        // 1 MiB in 1 KiB chunks against a 4 KiB limit, written as fast as the socket takes it
        const outcome = yield* chunkedPost({
          port: httpPort,
          path: "/webhooks/openai",
          chunk: "[".repeat(1024),
          total: 1024 * 1024,
          headers: signOpenAI("x")
        }).pipe(Effect.timeout(scaled(READ_TIMEOUT_MS + margin)))
        expect(outcome).toEqual({ status: 413, error: null })
      }))

    it.effect("with fal's JWKS hanging, bad-signature fal webhooks are answered 503 within the JWKS timeout", () =>
      Effect.gen(function*() {
        const body = JSON.stringify({ request_id: `req-${uuid()}`, status: "OK", payload: {} })
        const headers = {
          "x-fal-webhook-request-id": `req-${uuid()}`,
          "x-fal-webhook-user-id": "user-1",
          "x-fal-webhook-timestamp": String(nowSeconds()),
          "x-fal-webhook-signature": "ab".repeat(64)
        }
        const outcomes = yield* Effect.forEach(
          Array.from({ length: 5 }),
          () =>
            rawRequest({
              port: httpPort,
              head: head("/webhooks/fal", {
                "content-type": "application/json",
                "content-length": String(body.length),
                connection: "close",
                ...headers
              }),
              parts: [body]
            }),
          { concurrency: "unbounded" }
        ).pipe(Effect.timeout(scaled(JWKS_TIMEOUT_MS + margin)))
        expect(outcomes.map((o) => o.status)).toEqual([503, 503, 503, 503, 503])
      }))
  })
})
