import { describe, expect, layer } from "@effect/vitest"
import { Duration, Effect } from "effect"
import WebSocket from "ws"
import type { ProjectId } from "../../src/schema/ids.js"
import { noDatabase } from "../support/database.js"
import { scaled } from "../support/env.js"
import { until } from "../support/propagation.js"
import { freePort } from "../support/runner.js"
import {
  bearer,
  commitChange,
  commitHistory,
  concurrentWriters,
  headOf,
  layerStreamRunner,
  OTHER_TENANT,
  projectWithTasks,
  redisUrl,
  storedEvents,
  streamSettings,
  tokenFor
} from "../support/streams.js"
import { uuid } from "../support/tasks.js"

const settings = { ...streamSettings, WS_PING_INTERVAL: "300 millis" }

const PING_MS = 300

const port = await Effect.runPromise(freePort)
const base = `http://127.0.0.1:${port}`
const wsUrl = (projectId: string, query = "") => `ws://127.0.0.1:${port}/v1/projects/${projectId}/events/ws${query}`

/** What a WebSocket client saw: the upgrade's outcome, every message (parsed), pings, and how it was closed. */
interface WsClient {
  readonly socket: WebSocket
  /** 101 when upgraded, else the HTTP status of the refusal */
  readonly status: number
  /** the refusal's body, when refused */
  readonly body: string
  readonly messages: Array<Record<string, unknown>>
  readonly raw: Array<string>
  readonly pings: () => number
  readonly closed: () => { readonly code: number; readonly reason: string } | undefined
}

/** Opens a WebSocket and waits for the upgrade (or its refusal); collects from the very first frame. */
const openWs = (url: string, headers: Record<string, string> = {}, options: WebSocket.ClientOptions = {}) =>
  Effect.async<WsClient>((resume) => {
    const socket = new WebSocket(url, { headers, ...options })
    const messages: Array<Record<string, unknown>> = []
    const raw: Array<string> = []
    let pings = 0
    let closed: { code: number; reason: string } | undefined
    let done = false
    const finish = (status: number, body = "") => {
      if (done) return
      done = true
      resume(Effect.succeed({ socket, status, body, messages, raw, pings: () => pings, closed: () => closed }))
    }
    socket.on("message", (data) => {
      const text = data.toString()
      raw.push(text)
      messages.push(JSON.parse(text))
    })
    socket.on("ping", () => pings++)
    socket.on("open", () => finish(101))
    socket.on("close", (code, reason) => {
      closed = { code, reason: reason.toString() }
      finish(0)
    })
    socket.on("error", () => finish(0))
    socket.on("unexpected-response", (req, res) => {
      let body = ""
      res.setEncoding("utf8")
      res.on("data", (chunk: string) => (body += chunk))
      res.on("end", () => {
        finish(res.statusCode ?? 0, body)
        req.destroy()
      })
    })
  })

const events = (client: WsClient) => client.messages.filter((m) => m.type === "task.status")

const closeWs = (client: WsClient) => Effect.sync(() => client.socket.terminate())

/** Errors nothing handled in this process (the runner's side of the socket): each one would crash a runner. */
const uncaught: Array<unknown> = []
process.on("uncaughtExceptionMonitor", (error) => uncaught.push(error))

describe.skipIf(noDatabase || redisUrl === undefined)("WebSocket events on PostgreSQL and Redis", () => {
  layer(layerStreamRunner(port, settings), { timeout: scaled(120_000), excludeTestServices: true })((it) => {
    it.effect("frames: replay from ?after= under concurrent commits is the stored cursor sequence, then live", () =>
      Effect.gen(function*() {
        const { projectId, tasks } = yield* projectWithTasks(6)
        const token = yield* tokenFor()
        for (const task of tasks) yield* commitChange(task, { status: "running", stage: "generating", progress: 5 })
        const start = yield* headOf(projectId)
        const after = `${start.epoch}-${start.seq}`
        // history the client has not seen yet, committed before it connects
        yield* commitHistory(tasks)
        // writers keep committing while the client replays and joins the live stream
        const writers = concurrentWriters(tasks)
        const [client] = yield* Effect.all([openWs(wsUrl(projectId, `?after=${after}`), bearer(token)), writers], {
          concurrency: "unbounded"
        })
        expect(client.status).toBe(101)
        const head = yield* headOf(projectId)
        expect(head.seq).toBe(start.seq + 40 + 150)
        yield* until("every event", () => client.messages.length >= head.seq - start.seq, Duration.seconds(20))

        const stored = yield* storedEvents(projectId, start.seq)
        expect(client.messages.map((m) => m.event_id)).toEqual(stored.map((r) => `${start.epoch}-${r.cursor_seq}`))
        expect(client.messages.map((m) => `${m.task_id}@${m.task_version}`)).toEqual(
          stored.map((r) => `${r.task_id}@${Number(r.task_version)}`)
        )
        for (const m of client.messages) {
          expect(Object.keys(m).sort()).toEqual(["event_id", "payload", "task_id", "task_version", "type"])
          expect(m.type).toBe("task.status")
          expect(m.event_id).toMatch(/^\d+-\d+$/)
          expect(Object.keys(m.payload as object).sort()).toEqual(
            ["asset_id", "error_code", "progress", "stage", "status", "trace_id"]
          )
          expect(m.payload).toMatchObject({ status: "running", stage: "generating", asset_id: null, error_code: null })
        }
        // the last message carries the last committed state of its task
        const last = client.messages.at(-1)!
        expect((last.payload as { progress: number }).progress).toBe(84)
        expect(client.raw.join("\n")).not.toMatch(/https?:|provider_task|secret|token|tenant|attempt/)

        // and then live; the socket keeps order, so nothing extra (a late duplicate) came between
        yield* commitChange(tasks[0]!, { status: "provider_succeeded", stage: "generated", progress: 100 })
        yield* until(
          "the live event",
          () => client.messages.some((m) => m.event_id === `${head.epoch}-${head.seq + 1}`)
        )
        expect(client.messages).toHaveLength(head.seq - start.seq + 1)
        expect(client.messages.at(-1)).toEqual({
          type: "task.status",
          event_id: `${head.epoch}-${head.seq + 1}`,
          task_id: tasks[0],
          task_version: 2 + 1 + 6 + 25 + 1,
          payload: {
            status: "provider_succeeded",
            stage: "generated",
            progress: 100,
            asset_id: null,
            error_code: null,
            // the trace id the change was committed under (commitChange's)
            trace_id: "trace"
          }
        })
        expect(client.closed()).toBeUndefined()
        yield* closeWs(client)
      }))

    it.effect("a foreign-epoch cursor gets a reset to the head first, then live events from the head", () =>
      Effect.gen(function*() {
        const { projectId, tasks } = yield* projectWithTasks(1)
        const token = yield* tokenFor()
        for (let i = 0; i < 3; i++) {
          yield* commitChange(tasks[0]!, { status: "running", stage: "generating", progress: i })
        }
        const head = yield* headOf(projectId)
        const client = yield* openWs(wsUrl(projectId, `?after=${head.epoch + 1}-1`), bearer(token))
        expect(client.status).toBe(101)
        yield* until("the reset", () => client.messages.length >= 1, Duration.seconds(5))
        expect(client.messages[0]).toEqual({
          type: "reset",
          event_id: `${head.epoch}-${head.seq}`,
          reason: "foreign_epoch"
        })
        yield* commitChange(tasks[0]!, { status: "running", stage: "generating", progress: 50 })
        yield* until("the next event", () => client.messages.some((m) => m.type === "task.status"))
        // none of the history was replayed after the reset: the next event follows it at once
        expect(client.messages).toHaveLength(2)
        expect(client.messages[1]).toMatchObject({
          type: "task.status",
          event_id: `${head.epoch}-${head.seq + 1}`,
          task_id: tasks[0],
          payload: { progress: 50 }
        })
        yield* closeWs(client)
      }))

    it.effect("refused before the upgrade: foreign Origin 403, no credentials 401, another tenant's project 404", () =>
      Effect.gen(function*() {
        const { projectId, tasks } = yield* projectWithTasks(1)
        const token = yield* tokenFor()

        const evil = yield* openWs(wsUrl(projectId), { ...bearer(token), origin: "https://evil.example" })
        expect(evil.status).toBe(403)
        expect(evil.closed()).toBeUndefined()
        // the same request from the page's own origin is upgraded
        const same = yield* openWs(wsUrl(projectId), { ...bearer(token), origin: base })
        expect(same.status).toBe(101)
        yield* closeWs(same)

        const anonymous = yield* openWs(wsUrl(projectId))
        expect(anonymous.status).toBe(401)
        expect((yield* openWs(wsUrl(projectId), bearer("not-a-token"))).status).toBe(401)

        // another tenant: nothing of the project reaches it
        const intruder = yield* tokenFor({ tenant: OTHER_TENANT })
        const foreign = yield* openWs(wsUrl(projectId), bearer(intruder))
        expect(foreign.status).toBe(404)
        // the project's own client sees the next event: by then the intruder would have seen it too
        const owner = yield* openWs(wsUrl(projectId), bearer(token))
        yield* commitChange(tasks[0]!, { status: "running", stage: "generating", progress: 1 })
        yield* until("the owner's event", () => events(owner).length === 1, Duration.seconds(5))
        yield* closeWs(owner)
        expect(foreign.messages).toEqual([])
        expect(foreign.body + JSON.stringify(foreign.closed())).not.toContain(tasks[0]!)
        // a token naming only other projects gets the same answer
        const narrow = yield* openWs(wsUrl(projectId), bearer(yield* tokenFor({ projects: [uuid() as ProjectId] })))
        expect(narrow.status).toBe(404)
      }))

    it.effect("a client message over the frame limit (4096 bytes) closes the connection with 1009", () =>
      Effect.gen(function*() {
        const { projectId, tasks } = yield* projectWithTasks(1)
        const token = yield* tokenFor()
        const client = yield* openWs(wsUrl(projectId), bearer(token))
        expect(client.status).toBe(101)
        // at the limit: accepted (and ignored), the stream goes on
        client.socket.send("x".repeat(4096))
        yield* commitChange(tasks[0]!, { status: "running", stage: "generating", progress: 1 })
        yield* until("an event after a frame at the limit", () => events(client).length === 1, Duration.seconds(5))
        expect(client.closed()).toBeUndefined()
        // one byte over: closed by the server with 1009 (message too big)
        client.socket.send("x".repeat(4097))
        yield* until("closed", () => client.closed() !== undefined, Duration.seconds(5))
        expect(client.closed()!.code).toBe(1009)
        // the server is still serving
        const next = yield* openWs(wsUrl(projectId), bearer(token))
        expect(next.status).toBe(101)
        yield* commitChange(tasks[0]!, { status: "running", stage: "generating", progress: 2 })
        yield* until("an event on a new connection", () => events(next).length === 1, Duration.seconds(5))
        yield* closeWs(next)
        // the runner refused the frame without throwing: an uncaught error would have taken the runner down
        expect(uncaught.map(String)).toEqual([])
      }))

    it.effect("the server pings; a client that does not answer is terminated, one that does stays open", () =>
      Effect.gen(function*() {
        const { projectId, tasks } = yield* projectWithTasks(1)
        const token = yield* tokenFor()
        const polite = yield* openWs(wsUrl(projectId), bearer(token))
        const mute = yield* openWs(wsUrl(projectId), bearer(token), { autoPong: false })
        expect(polite.status).toBe(101)
        expect(mute.status).toBe(101)
        const openedAt = Date.now()
        yield* until("the mute client is cut off", () => mute.closed() !== undefined, Duration.seconds(4))
        // terminated (no close frame), within a few ping intervals, after it was pinged
        expect(mute.closed()!.code).toBe(1006)
        expect(Date.now() - openedAt).toBeLessThan(5 * PING_MS + 500)
        expect(mute.pings()).toBeGreaterThanOrEqual(1)
        // the polite one keeps being pinged and keeps its stream
        yield* until("four pings answered", () => polite.pings() >= 4, Duration.seconds(5))
        expect(polite.closed()).toBeUndefined()
        expect(polite.socket.readyState).toBe(WebSocket.OPEN)
        yield* commitChange(tasks[0]!, { status: "running", stage: "generating", progress: 7 })
        yield* until("a live event", () => events(polite).length === 1, Duration.seconds(5))
        yield* closeWs(polite)
      }))

    it.effect("a stream token opens one stream via ?stream_token=; its second use is refused with 401", () =>
      Effect.gen(function*() {
        const { projectId, tasks } = yield* projectWithTasks(1)
        const token = yield* tokenFor()
        const issue = yield* Effect.promise(() =>
          fetch(`${base}/v1/projects/${projectId}/stream-tokens`, { method: "POST", headers: bearer(token) })
        )
        expect(issue.status).toBe(201)
        const { token: streamToken } = (yield* Effect.promise(() => issue.json())) as { token: string }
        const first = yield* openWs(wsUrl(projectId, `?stream_token=${streamToken}`))
        expect(first.status).toBe(101)
        yield* commitChange(tasks[0]!, { status: "running", stage: "generating", progress: 3 })
        yield* until("a live event", () => events(first).length === 1, Duration.seconds(5))
        yield* closeWs(first)
        const again = yield* openWs(wsUrl(projectId, `?stream_token=${streamToken}`))
        expect(again.status).toBe(401)
        // a long-lived access token is never taken from the URL
        expect((yield* openWs(wsUrl(projectId, `?stream_token=${token}`))).status).toBe(401)
      }))
  })
})
