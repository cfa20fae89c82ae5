import { HttpClient, HttpClientRequest, HttpServer } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer, Logger, LogLevel, Metric, type MetricState } from "effect"
import { randomBytes } from "node:crypto"
import { TokenSigner } from "../../src/http/Auth.js"
import { Projects } from "../../src/persistence/Projects.js"
import { jsonLogger } from "../../src/runners/Logging.js"
import type { ProjectId, TenantId, UserId } from "../../src/schema/ids.js"
import { layerHttpTest } from "../../src/testing/TestRunner.js"
import { layerTestDatabase, noDatabase } from "../support/database.js"
import { scaled } from "../support/env.js"
import { layerTestRunner, withSettings } from "../support/runner.js"
import { openSse, payloads } from "../support/sse.js"
import { uuid } from "../support/tasks.js"
import { eventually, OPENAI_TEST_SECRET, openaiEvent, openAISigner, submittedTask } from "../support/webhooks.js"

const tenant = uuid() as TenantId
const project = uuid() as ProjectId
const layerProject = Layer.effectDiscard(Effect.flatMap(Projects, (p) => p.ensure(tenant, project)))

/** Every log line of the runner, written by the LOG_FORMAT=json logger and parsed back. */
const lines: Array<Record<string, unknown>> = []
const captureLogs = Layer.merge(
  Logger.replace(Logger.defaultLogger, Logger.map(jsonLogger, (line) => lines.push(JSON.parse(line)))),
  Logger.minimumLogLevel(LogLevel.Info)
)

const TestLayer = layerHttpTest.pipe(
  Layer.provideMerge(layerProject.pipe(Layer.provideMerge(layerTestRunner(layerTestDatabase())))),
  Layer.provide(captureLogs),
  Layer.provide(withSettings({ OPENAI_WEBHOOK_SECRET: OPENAI_TEST_SECRET, INBOX_SWEEP_INTERVAL: "200 millis" }))
)

const hex = (bytes: number) => randomBytes(bytes).toString("hex")

/** The test's client sends the traceparent it is given (an Effect client would send its own span's otherwise). */
const plainClient = Effect.map(HttpClient.HttpClient, (c) => HttpClient.withTracerPropagation(c, false))
const traceparent = (traceId: string) => `00-${traceId}-${hex(8)}-01`

/** A signed OpenAI webhook with `body`, sent with a traceparent naming `traceId` when one is given. */
const postWebhook = (body: string, traceId?: string) =>
  Effect.flatMap(plainClient, (client) =>
    client.execute(
      HttpClientRequest.post("/webhooks/openai").pipe(
        HttpClientRequest.setHeaders({
          ...openAISigner(OPENAI_TEST_SECRET)(body),
          ...(traceId === undefined ? {} : { traceparent: traceparent(traceId) })
        }),
        HttpClientRequest.bodyText(body, "application/json")
      )
    )).pipe(Effect.orDie)

const token = Effect.flatMap(
  TokenSigner,
  (s) => s.sign({ tenant_id: tenant, sub: uuid() as UserId, projects: [project] })
)

/** A request with these headers; its status, x-trace-id header and JSON body (null when empty). */
const send = (method: "GET" | "POST", url: string, headers: Record<string, string>, json?: unknown) =>
  Effect.gen(function*() {
    const client = yield* plainClient
    let req = (method === "GET" ? HttpClientRequest.get(url) : HttpClientRequest.post(url)).pipe(
      HttpClientRequest.setHeaders(headers)
    )
    if (json !== undefined) req = yield* HttpClientRequest.bodyJson(req, json)
    const res = yield* client.execute(req)
    const text = yield* res.text
    return {
      status: res.status,
      traceId: res.headers["x-trace-id"],
      body: text.length > 0 ? JSON.parse(text) as Record<string, unknown> : null
    }
  }).pipe(Effect.orDie)

const api = (method: "GET" | "POST", url: string, headers: Record<string, string>, json?: unknown) =>
  Effect.flatMap(token, (t) => send(method, url, { authorization: `Bearer ${t}`, ...headers }, json))

const eventTraces = (taskId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ task_version: number; trace_id: string; source: string }>`
      SELECT task_version, trace_id, source FROM task_events WHERE task_id = ${taskId} ORDER BY task_version`)

const baseUrl = Effect.map(HttpServer.HttpServer, (server) => {
  const address = server.address as HttpServer.TcpAddress
  return `http://127.0.0.1:${address.port}`
})

/** The count of refused traceparent headers, from the metrics registry /metrics exports. */
const invalidTraceparents = Effect.map(Metric.snapshot, (pairs) => {
  const pair = pairs.find((p) => p.metricKey.name === "traceparent_invalid_total")
  return pair === undefined ? 0 : Number((pair.metricState as MetricState.MetricState.Counter<number>).count)
})

const logged = (predicate: (line: Record<string, unknown>) => boolean) => lines.filter(predicate)

describe.skipIf(noDatabase)("trace ids: request → task event → SSE frame → log lines → error bodies", () => {
  layer(TestLayer, { timeout: scaled(60_000), excludeTestServices: true })((it) => {
    it.effect("a traceparent on POST /v1/tasks reaches the task_events row, the SSE frame and the transition's log", () =>
      Effect.gen(function*() {
        const created = hex(16)
        const res = yield* api("POST", `/v1/projects/${project}/tasks`, {
          traceparent: traceparent(created),
          "idempotency-key": uuid()
        }, { provider: "openai", model: "sora-2", prompt: "a cat surfing", duration_seconds: 8 })
        expect(res.status).toBe(201)
        expect(res.traceId).toBe(created)
        const taskId = String(res.body!.task_id)

        // a cancel is a transition of its own, under its own request's trace id
        const canceled = hex(16)
        const cancel = yield* api("POST", `/v1/projects/${project}/tasks/${taskId}/cancel`, {
          traceparent: traceparent(canceled)
        })
        expect(cancel.status).toBe(202)
        expect(cancel.traceId).toBe(canceled)
        expect(yield* eventTraces(taskId)).toEqual([
          { task_version: 1, trace_id: created, source: "api" },
          { task_version: 2, trace_id: canceled, source: "api" }
        ])
        // the outbox rows are the queue's message bodies (OutboxRelay): the domain events carry the trace ids too
        const sql = yield* SqlClient.SqlClient
        const outbox = yield* sql<{ trace_id: string }>`
          SELECT payload->>'trace_id' AS trace_id FROM outbox_events WHERE aggregate_id = ${taskId}
          ORDER BY aggregate_version`
        expect(outbox.map((r) => r.trace_id)).toEqual([created, canceled])

        // the stream replays both changes, each frame with the trace id of the request that made it
        const base = yield* baseUrl
        const epoch = String(res.body!.cursor).split("-")[0]
        const client = yield* openSse(`${base}/v1/projects/${project}/events?after=${epoch}-0&task_id=${taskId}`, {
          authorization: `Bearer ${yield* token}`
        })
        expect(client.headers["x-trace-id"]).toMatch(/^[0-9a-f]{32}$/)
        yield* eventually(Effect.sync(() => payloads(client)), (p) => p.length >= 2)
        client.close()
        expect(payloads(client).map((p) => [p.task_version, p.status, p.trace_id])).toEqual([
          [1, "queued", created],
          [2, cancel.body!.status, canceled]
        ])

        // one INFO line per status change, naming the task, the trace, both states, the version and the source
        const transitions = logged((l) => l.task_id === taskId && l.to !== undefined)
        expect(transitions.map(({ from, level, source, to, trace_id, version }) => ({
          level,
          from,
          to,
          version,
          source,
          trace_id
        }))).toEqual([
          { level: "INFO", from: "none", to: "queued", version: 1, source: "api", trace_id: created },
          { level: "INFO", from: "queued", to: cancel.body!.status, version: 2, source: "api", trace_id: canceled }
        ])
        // and the request's own lines (the HTTP access line) carry its trace id
        expect(logged((l) => l.trace_id === canceled && l.message === "Sent HTTP response").length).toBe(1)
      }))

    it.effect("every error body carries the trace id: the caller's, or a new one returned in x-trace-id", () =>
      Effect.gen(function*() {
        const traceId = hex(16)
        const missing = yield* api("GET", `/v1/projects/${project}/tasks/${uuid()}`, {
          traceparent: traceparent(traceId)
        })
        expect(missing.status).toBe(404)
        expect(missing.traceId).toBe(traceId)
        expect(missing.body).toMatchObject({ _tag: "TaskNotFound", trace_id: traceId })

        const invalid = yield* api("POST", `/v1/projects/${project}/tasks`, { "idempotency-key": uuid() }, {
          provider: "openai"
        })
        expect(invalid.status).toBe(400)
        expect(invalid.traceId).toMatch(/^[0-9a-f]{32}$/)
        expect(invalid.body).toMatchObject({ trace_id: invalid.traceId })

        // an invalid traceparent (upper case, all-zero ids) is ignored, and counted: the request gets a trace of its own
        const invalidBefore = yield* invalidTraceparents
        for (const bad of [`00-${hex(16).toUpperCase()}-${hex(8)}-01`, `00-${"0".repeat(32)}-${hex(8)}-01`, "junk"]) {
          const res = yield* send("GET", `/v1/projects/${project}/tasks`, { traceparent: bad })
          expect(res.status).toBe(401)
          expect(res.traceId).toMatch(/^[0-9a-f]{32}$/)
          expect(res.traceId).not.toBe("0".repeat(32))
          expect(res.body).toMatchObject({ trace_id: res.traceId })
        }
        expect((yield* invalidTraceparents) - invalidBefore).toBe(3)

        // the raw routes too: a refused stream and a refused webhook
        const base = yield* baseUrl
        const stream = yield* openSse(`${base}/v1/projects/${project}/events`, { traceparent: traceparent(traceId) })
        expect(stream.status).toBe(401)
        expect(stream.headers["x-trace-id"]).toBe(traceId)
        yield* eventually(Effect.sync(() => stream.ended()), (ended) => ended)
        expect(JSON.parse(stream.body())).toMatchObject({ trace_id: traceId })
        const forged = yield* send("POST", "/webhooks/openai", { traceparent: traceparent(traceId) }, {})
        expect(forged.status).toBe(401)
        expect(forged.traceId).toBe(traceId)
        expect(forged.body).toEqual({ trace_id: traceId })
      }))

    it.effect("a webhook's trace id reaches its inbox row, the task event it causes and the processor's log", () =>
      Effect.gen(function*() {
        const videoId = `video_${uuid()}`
        const { task, taskId } = yield* submittedTask("openai", videoId)
        // a browser following the task's project sees the change live, with the webhook's trace id
        const signed = yield* Effect.flatMap(
          TokenSigner,
          (s) => s.sign({ tenant_id: task.tenantId, sub: uuid() as UserId, projects: [task.projectId] })
        )
        const stream = yield* openSse(
          `${yield* baseUrl}/v1/projects/${task.projectId}/events?after=${task.lastCursor.toString()}`,
          { authorization: `Bearer ${signed}` }
        )
        const traceId = hex(16)
        const body = openaiEvent(videoId)
        const res = yield* postWebhook(body, traceId)
        expect(res.status).toBe(204)
        expect(res.headers["x-trace-id"]).toBe(traceId)

        const sql = yield* SqlClient.SqlClient
        const [row] = yield* sql<{ trace_id: string }>`
          SELECT trace_id FROM provider_callback_inbox WHERE provider = 'openai' AND provider_task_id = ${videoId}`
        expect(row!.trace_id).toBe(traceId)
        const events = yield* eventually(eventTraces(taskId), (e) => e.length >= 2)
        expect(events[1]).toEqual({ task_version: 2, trace_id: traceId, source: "webhook" })
        yield* eventually(Effect.sync(() => payloads(stream)), (p) => p.length >= 1)
        stream.close()
        expect(payloads(stream)[0]).toMatchObject({ task_id: taskId, task_version: 2, trace_id: traceId })
        expect(logged((l) => l.task_id === taskId && l.to === "provider_succeeded")).toMatchObject([
          { trace_id: traceId, source: "webhook", version: 2 }
        ])
        // a contradicting webhook (failed after success): the entity's own line names the task and that webhook's trace
        const contradiction = hex(16)
        const failed = openaiEvent(videoId, "video.failed")
        const refused = yield* postWebhook(failed, contradiction)
        expect(refused.status).toBe(204)
        const conflictLines = yield* eventually(
          Effect.sync(() => logged((l) => l.message === "contradictory provider observation sent to reconciliation")),
          (found) => found.some((l) => l.task_id === taskId)
        )
        expect(conflictLines.filter((l) => l.task_id === taskId)).toMatchObject([{ trace_id: contradiction }])
        // without a traceparent, the trace id the gateway answered with is the one stored
        const other = `video_${uuid()}`
        yield* submittedTask("openai", other)
        const plain = openaiEvent(other)
        const answered = yield* postWebhook(plain)
        expect(answered.status).toBe(204)
        const [stored] = yield* sql<{ trace_id: string }>`
          SELECT trace_id FROM provider_callback_inbox WHERE provider = 'openai' AND provider_task_id = ${other}`
        expect(answered.headers["x-trace-id"]).toMatch(/^[0-9a-f]{32}$/)
        expect(stored!.trace_id).toBe(answered.headers["x-trace-id"])
      }))
  })
})
