import { FetchHttpClient, HttpClient, HttpClientRequest } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { afterAll, describe, expect, layer } from "@effect/vitest"
import { Duration, Effect, Layer, Metric } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import WebSocket from "ws"
import { SYSTEM_MODES } from "../../src/domain/systemModeNames.js"
import { modeGates, type SystemMode } from "../../src/domain/systemModes.js"
import { submissionsHeld } from "../../src/entities/submitter.js"
import { TokenSigner } from "../../src/http/Auth.js"
import { inboxDrainsPaused } from "../../src/intake/InboxProcessor.js"
import { Projects } from "../../src/persistence/Projects.js"
import type { ProjectId, TenantId, UserId } from "../../src/schema/ids.js"
import { simulatorEnv } from "../../src/simulator/embedded.js"
import { adminClient } from "../support/admin.js"
import { layerTestDatabase, noDatabase } from "../support/database.js"
import { scaled } from "../support/env.js"
import { waitForStatus } from "../support/lifecycle.js"
import { freePort, layerTestRunner, quietLogs, withSettings } from "../support/runner.js"
import { layerRunnerHttp, layerSim, Sim } from "../support/simulator.js"
import { openSse } from "../support/sse.js"
import { uuid } from "../support/tasks.js"
import { eventually } from "../support/webhooks.js"

const [httpPort, simPort] = await Effect.runPromise(Effect.all([freePort, freePort]))
const platform = `http://127.0.0.1:${httpPort}`
const sim = `http://127.0.0.1:${simPort}`
const objects = fs.mkdtempSync(path.join(os.tmpdir(), "modes-objects-"))
afterAll(() => fs.rmSync(objects, { recursive: true, force: true }))

// The old processor counted each fenced try against a callback and dead-lettered it after INBOX_MAX_RETRIES.
const INBOX_MAX_RETRIES = 3
const drainsPaused = Metric.value(inboxDrainsPaused).pipe(Effect.map((s) => s.count))

const settings = {
  ...simulatorEnv(platform, sim, ["openai", "replicate"]),
  // polls ~100 times rarer than the seed's (the first one minutes after submission): what moves a task here is a
  // submission or a callback, never a poll
  POLL_INTERVAL_SCALE: "100",
  PROVIDER_TIMEOUT: "2 seconds",
  OBJECT_STORE_DIR: objects,
  REDIS_KEY_PREFIX: `test-${uuid()}:`,
  INBOX_MAX_RETRIES: String(INBOX_MAX_RETRIES),
  FENCE_REFRESH_INTERVAL: "200 millis"
}

const tenant = uuid() as TenantId
const project = uuid() as ProjectId

const layerProject = Layer.effectDiscard(Effect.flatMap(Projects, (p) => p.ensure(tenant, project)))

const TestLayer = layerSim(simPort, platform).pipe(
  Layer.provideMerge(
    layerRunnerHttp(httpPort).pipe(
      Layer.provideMerge(
        layerProject.pipe(Layer.provideMerge(layerTestRunner(layerTestDatabase(), { lifecycle: true })))
      )
    )
  ),
  Layer.provide(FetchHttpClient.layer),
  Layer.provide(quietLogs),
  Layer.provide(withSettings(settings))
)

const tenantToken = Effect.flatMap(
  TokenSigner,
  (s) => s.sign({ tenant_id: tenant, sub: uuid() as UserId, projects: [project] })
)

/** A tenant's request to the API: the status and the parsed JSON body. */
const api = (method: "GET" | "POST", url: string, json?: unknown) =>
  Effect.gen(function*() {
    const client = yield* HttpClient.HttpClient
    let req = method === "GET"
      ? HttpClientRequest.get(`${platform}${url}`)
      : HttpClientRequest.post(`${platform}${url}`)
    req = HttpClientRequest.bearerToken(req, yield* tenantToken)
    if (json !== undefined) {
      req = HttpClientRequest.setHeader(req, "idempotency-key", uuid())
      req = yield* HttpClientRequest.bodyJson(req, json)
    }
    const res = yield* client.execute(req)
    const text = yield* res.text
    return { status: res.status, body: text.length > 0 ? JSON.parse(text) : null }
  }).pipe(Effect.provide(FetchHttpClient.layer), Effect.orDie)

const create = (provider: "openai" | "replicate") =>
  api("POST", `/v1/projects/${project}/tasks`, {
    provider,
    model: provider === "openai" ? "sora-2" : "kwaivgi/kling-v2.1",
    prompt: "a lighthouse at dusk",
    duration_seconds: provider === "openai" ? 4 : 5
  })

const setMode = (mode: SystemMode, providers?: ReadonlyArray<string>) =>
  Effect.flatMap(adminClient(platform), (c) =>
    c.operations.setMode({
      payload: { mode, reason: `test: ${mode}`, ...(providers === undefined ? {} : { providers }) }
    })).pipe(Effect.orDie)

/** A WebSocket on the events route with a bearer token, once open: the messages it got, and its close code. */
const openSocket = (url: string, token: string) =>
  Effect.async<{ readonly messages: () => Array<unknown>; readonly closed: () => number | undefined }>((resume) => {
    const socket = new WebSocket(url, { headers: { authorization: `Bearer ${token}` } })
    const messages: Array<unknown> = []
    let closed: number | undefined
    socket.on("message", (data) => messages.push(JSON.parse(String(data))))
    socket.on("close", (code) => (closed = code))
    socket.on("open", () => resume(Effect.succeed({ messages: () => messages, closed: () => closed })))
    socket.on("unexpected-response", (_req, res) => resume(Effect.dieMessage(`WebSocket refused: ${res.statusCode}`)))
    socket.on("error", (e) => resume(Effect.die(e)))
  })

describe.skipIf(noDatabase)("system modes through the admin API (seed 19.5.5, 19.10.2)", () => {
  layer(TestLayer, { timeout: scaled(180_000), excludeTestServices: true })((it) => {
    it.effect("each mode admits new tasks only where the seed lets it; refusals are 503 naming the mode", () =>
      Effect.gen(function*() {
        const simulator = yield* Sim
        yield* simulator.setFaults({ jobDurationMs: 60_000, dropWebhooks: 1 })
        for (const mode of SYSTEM_MODES) {
          const view = yield* setMode(mode, mode === "DEGRADED_PROVIDER" ? ["replicate"] : undefined)
          expect(view.mode).toBe(mode)
          const created = yield* create("openai")
          const listed = yield* api("GET", `/v1/projects/${project}/tasks`)
          if (modeGates[mode].admission === false) {
            expect(created.status, mode).toBe(503)
            expect(created.body.mode, mode).toBe(mode)
            expect(JSON.stringify(created.body), mode).toContain(mode)
          } else {
            expect(created.status, mode).toBe(201)
          }
          expect(listed.status, mode).toBe(modeGates[mode].reads === false ? 503 : 200)
          if (mode === "MAINTENANCE") expect(listed.body).toMatchObject({ _tag: "ModeUnavailable", mode })
        }
        yield* setMode("NORMAL")
        const admin = yield* adminClient(platform)
        const { changes } = yield* admin.operations.audit()
        // newest first: the eight changes of this test, by the operator the token names
        expect(changes.slice(0, 8).map((c) => c.to).reverse()).toEqual([
          "NORMAL",
          "DEGRADED_NOTIFY",
          "DEGRADED_PROVIDER (replicate)",
          "QUEUE_ONLY",
          "RECONCILE_ONLY",
          "READ_ONLY",
          "MAINTENANCE",
          "NORMAL"
        ])
        expect(changes[0]).toMatchObject({
          operator: "ops-test",
          what: "mode",
          from: "MAINTENANCE",
          reason: "test: NORMAL"
        })
      }))

    it.effect("submissions pause in QUEUE_ONLY and for a DEGRADED_PROVIDER's providers only, and resume", () =>
      Effect.gen(function*() {
        const simulator = yield* Sim
        yield* simulator.setFaults({ jobDurationMs: 60_000, dropWebhooks: 1 })
        const heldLooks = Metric.value(Metric.tagged(submissionsHeld, "provider", "openai")).pipe(
          Effect.map((s) => s.count)
        )
        yield* setMode("QUEUE_ONLY")
        const queued = yield* create("openai")
        expect(queued.status).toBe(201)
        // the submitter looked at the due submission twice (once a second) and held it back both times
        const held = yield* heldLooks
        yield* eventually(heldLooks, (n) => n >= held + 2)
        expect((yield* api("GET", `/v1/projects/${project}/tasks/${queued.body.task_id}`)).body.status).toBe("queued")

        yield* setMode("DEGRADED_PROVIDER", ["replicate"])
        const degraded = yield* create("replicate")
        yield* waitForStatus([queued.body.task_id], ["submitted"], Duration.seconds(20))
        const healthy = yield* create("openai")
        yield* waitForStatus([healthy.body.task_id], ["submitted"], Duration.seconds(20))
        // the healthy provider's task went through while the degraded one's, admitted first, still waits
        expect((yield* api("GET", `/v1/projects/${project}/tasks/${degraded.body.task_id}`)).body.status).toBe("queued")

        yield* setMode("NORMAL")
        yield* waitForStatus([degraded.body.task_id], ["submitted"], Duration.seconds(20))
      }))

    it.effect("READ_ONLY serves reads and refuses writes with 503 naming the mode", () =>
      Effect.gen(function*() {
        const simulator = yield* Sim
        yield* simulator.setFaults({ jobDurationMs: 60_000, dropWebhooks: 1 })
        const t = yield* create("openai")
        yield* waitForStatus([t.body.task_id], ["submitted"], Duration.seconds(20))
        yield* setMode("READ_ONLY")
        const read = yield* api("GET", `/v1/projects/${project}/tasks/${t.body.task_id}`)
        expect(read.status).toBe(200)
        expect(read.body.status).toBe("submitted")
        const cancel = yield* api("POST", `/v1/projects/${project}/tasks/${t.body.task_id}/cancel`)
        expect(cancel.status).toBe(503)
        expect(cancel.body).toMatchObject({ _tag: "WriteFenced", mode: "READ_ONLY" })
        expect((yield* create("openai")).body).toMatchObject({ _tag: "WriteFenced", mode: "READ_ONLY" })
        yield* setMode("NORMAL")
        expect((yield* api("POST", `/v1/projects/${project}/tasks/${t.body.task_id}/cancel`)).status).toBe(202)
      }))

    it.effect("a callback received during a READ_ONLY window is applied after it, not dead-lettered", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const simulator = yield* Sim
        yield* simulator.setFaults({
          jobDurationMs: 2_000,
          dropWebhooks: 0,
          outcomes: { succeeded: 1, failed: 0, canceled: 0 }
        })
        const t = yield* create("openai")
        const taskId: string = t.body.task_id
        yield* waitForStatus([taskId], ["submitted", "running"], Duration.seconds(20))
        yield* setMode("READ_ONLY")
        const inbox = sql<{ process_status: string; retry_count: number }>`
          SELECT i.process_status, i.retry_count FROM provider_callback_inbox i
          JOIN task_attempts a ON a.provider_task_id = i.provider_task_id AND a.provider = i.provider
          WHERE a.task_id = ${taskId} AND i.payload->>'type' = 'video.completed'`
        // the provider's completion arrives during the window, and is stored (204)
        yield* eventually(inbox, (rows) => rows.length === 1)
        // the processor looks at the inbox again and again during the window (a sweep every 200 ms), and leaves the row
        // untouched: the old processor counted each fenced try, and after INBOX_MAX_RETRIES (3) the row was dead
        const paused = yield* drainsPaused
        yield* eventually(drainsPaused, (n) => n >= paused + INBOX_MAX_RETRIES + 1)
        expect((yield* inbox)[0]).toMatchObject({ process_status: "pending", retry_count: 0 })
        expect((yield* api("GET", `/v1/projects/${project}/tasks/${taskId}`)).body.status).not.toBe("ready")
        yield* setMode("NORMAL")
        // the callback's effect: the provider's success, then the output fetched and checked (polls are minutes away)
        yield* waitForStatus([taskId], ["ready"], Duration.seconds(30))
        const [row] = yield* inbox
        // applied, and no try of the window was counted against it
        expect(row).toMatchObject({ process_status: "processed", retry_count: 0 })
        const sources = yield* sql<{ source: string; status: string }>`
          SELECT source, public_payload->>'status' AS status FROM task_events WHERE task_id = ${taskId}
          ORDER BY task_version`
        expect(sources).toContainEqual({ source: "webhook", status: "provider_succeeded" })
      }))

    it.effect("DEGRADED_NOTIFY: open streams are told and ended, new ones refused; nothing is lost", () =>
      Effect.gen(function*() {
        const simulator = yield* Sim
        yield* simulator.setFaults({ jobDurationMs: 60_000, dropWebhooks: 1 })
        const token = yield* tenantToken
        const events = `${platform}/v1/projects/${project}/events`
        const stream = yield* openSse(events, { authorization: `Bearer ${token}` })
        expect(stream.status).toBe(200)
        const socket = yield* openSocket(`${events.replace("http:", "ws:")}/ws`, token)
        yield* setMode("DEGRADED_NOTIFY")
        yield* eventually(Effect.sync(() => stream.ended()), (ended) => ended)
        expect(stream.events.find((e) => e.event === "mode")?.data).toBe(
          JSON.stringify({ mode: "DEGRADED_NOTIFY", live: false })
        )
        // an open WebSocket is told too, and closed with 1013 (try again later)
        yield* eventually(Effect.sync(() => socket.closed()), (code) => code !== undefined)
        expect(socket.closed()).toBe(1013)
        expect(socket.messages()).toContainEqual({ type: "mode", mode: "DEGRADED_NOTIFY", live: false })
        const refused = yield* openSse(events, { authorization: `Bearer ${token}` })
        expect(refused.status).toBe(503)
        expect(JSON.parse(refused.body())).toMatchObject({ mode: "DEGRADED_NOTIFY" })
        refused.close()
        // facts keep being written: a task created now is read by snapshot...
        const cursor = (yield* api("GET", `/v1/projects/${project}/tasks`)).body.cursor as string
        const t = yield* create("openai")
        expect(t.status).toBe(201)
        expect((yield* api("GET", `/v1/projects/${project}/tasks/${t.body.task_id}`)).status).toBe(200)
        // ...and replayed by cursor once streams open again
        yield* setMode("NORMAL")
        const resumed = yield* openSse(`${events}?after=${cursor}`, { authorization: `Bearer ${token}` })
        expect(resumed.status).toBe(200)
        yield* eventually(
          Effect.sync(() =>
            resumed.events.filter((e) => e.event === "task.status").map((e) => JSON.parse(e.data).task_id)
          ),
          (ids) => ids.includes(t.body.task_id)
        )
        resumed.close()
      }))
  })
})
