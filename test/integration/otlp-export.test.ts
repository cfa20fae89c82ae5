import { HttpClient, HttpClientRequest } from "@effect/platform"
import { afterAll, describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { randomBytes } from "node:crypto"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { layerHttpTest } from "../../src/testing/TestRunner.js"
import { layerTracing } from "../../src/tracing/Tracing.js"
import { layerTestDatabase, noDatabase } from "../support/database.js"
import { scaled } from "../support/env.js"
import { layerTestRunner, quietLogs, withSettings } from "../support/runner.js"
import { uuid } from "../support/tasks.js"
import { eventually } from "../support/webhooks.js"

interface OtlpSpan {
  readonly traceId: string
  readonly spanId: string
  readonly parentSpanId?: string
  readonly name: string
}

/**
 * A stand-in OTLP/HTTP receiver (there is no collector on this machine): a Node server that accepts what a collector
 * accepts on /v1/traces (JSON export requests) and records the spans it was sent.
 */
const received: Array<{ path: string; contentType: string | undefined; spans: Array<OtlpSpan> }> = []
const collector = http.createServer((req, res) => {
  let body = ""
  req.setEncoding("utf8")
  req.on("data", (chunk: string) => (body += chunk))
  req.on("end", () => {
    const parsed = JSON.parse(body) as {
      resourceSpans: Array<{ scopeSpans: Array<{ spans: Array<OtlpSpan> }> }>
    }
    received.push({
      path: req.url ?? "",
      contentType: req.headers["content-type"],
      spans: parsed.resourceSpans.flatMap((r) => r.scopeSpans.flatMap((s) => s.spans))
    })
    res.writeHead(200, { "content-type": "application/json" }).end("{}")
  })
})
await new Promise<void>((resolve) => collector.listen(0, "127.0.0.1", resolve))
const endpoint = `http://127.0.0.1:${(collector.address() as AddressInfo).port}`
afterAll(() => void collector.close())

const TestLayer = layerHttpTest.pipe(
  Layer.provideMerge(layerTestRunner(layerTestDatabase())),
  Layer.provide(layerTracing),
  Layer.provide(quietLogs),
  Layer.provide(withSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: endpoint, OTEL_EXPORT_INTERVAL: "100 millis" }))
)

describe.skipIf(noDatabase)("OTLP trace export (OTEL_EXPORTER_OTLP_ENDPOINT)", () => {
  layer(TestLayer, { timeout: scaled(60_000), excludeTestServices: true })((it) => {
    it.effect("a request's spans reach the collector under the trace id of its traceparent", () =>
      Effect.gen(function*() {
        const traceId = randomBytes(16).toString("hex")
        const callerSpan = randomBytes(8).toString("hex")
        // the test's client sends the caller's traceparent as given (not a span of its own)
        const client = HttpClient.withTracerPropagation(yield* HttpClient.HttpClient, false)
        const res = yield* client.execute(
          HttpClientRequest.get(`/v1/projects/${uuid()}/tasks`).pipe(
            HttpClientRequest.setHeader("traceparent", `00-${traceId}-${callerSpan}-01`)
          )
        ).pipe(Effect.orDie)
        expect(res.status).toBe(401)
        expect(res.headers["x-trace-id"]).toBe(traceId)

        const spans = yield* eventually(
          Effect.sync(() => received.flatMap((r) => r.spans).filter((s) => s.traceId === traceId)),
          (s) => s.length > 0
        )
        expect(received.every((r) => r.path === "/v1/traces" && r.contentType === "application/json")).toBe(true)
        // the server span of the request is the child of the caller's span
        expect(spans.find((s) => s.parentSpanId === callerSpan)).toMatchObject({ name: "http.server GET" })
      }))
  })
})
