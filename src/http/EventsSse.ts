/**
 * Where Effect stops: the SSE transport. Authenticating and replaying run as Effects; an open stream is a plain
 * Node response written by plain callbacks (no fiber, span or Scope held per client), because an idle stream in
 * the platform's pipeline measured 28–64 KiB of heap against ~5 KiB for a bare Node response (see RawRoutes.ts).
 */
import { Duration, Effect, type Fiber, FiberSet, Layer } from "effect"
import type { IncomingMessage, ServerResponse } from "node:http"
import { transportMetrics } from "../gateway/deliveryMetrics.js"
import { type CloseReason, EventGateway, type Transport } from "../gateway/EventGateway.js"
import { StreamSettings } from "../gateway/streamSettings.js"
import { type CursorProblem, framePayload, type StreamEvent } from "../persistence/EventLog.js"
import { WriteFence } from "../persistence/WriteFence.js"
import { newTraceId, withTraceId } from "../tracing/TraceId.js"
import { HeartbeatRing } from "./heartbeatRing.js"
import { inSlices } from "./inSlices.js"
import { endStreamsWhileLivePaused } from "./livePause.js"
import { RawRoutes } from "./RawRoutes.js"
import { type Holder, Revocations } from "./Revocations.js"
import { EVENTS_PATH, makeStreamAuth } from "./StreamAuth.js"
import { errorBody, TRACE_HEADER, traceparentOf } from "./TraceIds.js"

/** The SSE frame of an event: built once per event, whatever the number of clients it goes to. */
const frames = new WeakMap<StreamEvent, string>()
export const sseFrame = (event: StreamEvent): string => {
  let frame = frames.get(event)
  if (frame === undefined) {
    frame = `id: ${event.cursor}\nevent: task.status\ndata: ${JSON.stringify(framePayload(event))}\n\n`
    frames.set(event, frame)
  }
  return frame
}

/** The last frame of a stream whose token was revoked: the client's reconnect is refused (401) anyway. */
const REVOKED_FRAME = `event: revoked\ndata: ${JSON.stringify({ reason: "token_revoked" })}\n\n`

const resetFrame = (problem: CursorProblem, cursor: string) =>
  `id: ${cursor}\nevent: reset\ndata: ${JSON.stringify({ reason: problem, cursor })}\n\n`

/** An answer before the stream opened: a status and a JSON error with the request's trace id, like the API's. */
export const refuseHttp =
  (res: ServerResponse, traceId: string) => (status: number, tag: string, message: string, retryAfter?: number) => {
    if (res.headersSent) return void res.destroy()
    const headers: Record<string, string> = {
      "content-type": "application/json",
      "cache-control": "no-store",
      [TRACE_HEADER]: traceId
    }
    if (retryAfter !== undefined) headers["retry-after"] = String(retryAfter)
    res.writeHead(status, headers).end(errorBody({ _tag: tag, message }, traceId))
  }

/** Where the flattening read of a response head goes (SseTransport.open): a result kept is not optimised away. */
let headerProbe = 0

const SSE_HEADERS = {
  "content-type": "text/event-stream; charset=utf-8",
  "cache-control": "no-cache, no-transform",
  connection: "keep-alive",
  "x-accel-buffering": "no"
}

/** What every SSE stream of a runner shares: its settings, its open streams, its metrics. */
interface SseShared {
  readonly retryMs: number
  readonly deadlineMs: number
  readonly open: HeartbeatRing<ServerResponse>
  readonly blocked: WeakSet<ServerResponse>
  readonly metrics: ReturnType<typeof transportMetrics>
}

/**
 * One client's SSE response as the gateway's Transport. A class, not an object of closures: its methods are its
 * prototype's, so an idle stream holds three fields, not five functions and their context (bench:sse, per stream).
 */
class SseTransport implements Transport {
  constructor(
    private readonly res: ServerResponse,
    private readonly traceId: string,
    private readonly sse: SseShared
  ) {}

  open(): void {
    this.res.writeHead(200, { ...SSE_HEADERS, [TRACE_HEADER]: this.traceId })
    this.res.write(`retry: ${this.sse.retryMs}\n\n`)
    // node:http keeps the head it built (`_header`, read for `headersSent`) for the stream's life, as a rope of ~25
    // concatenated strings (~0.8 KiB in a heap snapshot); reading a character makes V8 flatten it in place. Only read,
    // never written. bench:sse, 5,000 idle streams, 2 runs each: live heap 7.3 KiB per stream against 7.9-8.0
    const header = (this.res as unknown as { _header?: unknown })._header
    if (typeof header === "string") headerProbe ^= header.charCodeAt(0)
    this.sse.open.add(this.res)
    this.sse.metrics.opened()
  }

  send(event: StreamEvent): boolean {
    const written = this.res.write(sseFrame(event))
    this.sse.metrics.delivered(event)
    return written
  }

  reset(problem: CursorProblem, cursor: string): boolean {
    return this.res.write(resetFrame(problem, cursor))
  }

  whenDrained(f: () => void, stalled: () => void): void {
    const { res, sse } = this
    sse.blocked.add(res)
    const timer = setTimeout(() => {
      res.off("drain", drained)
      res.off("close", gone)
      stalled()
    }, sse.deadlineMs)
    const gone = () => clearTimeout(timer)
    const drained = () => {
      clearTimeout(timer)
      res.off("close", gone)
      sse.blocked.delete(res)
      f()
    }
    res.once("drain", drained)
    res.once("close", gone)
  }

  close(reason: CloseReason): void {
    // a client that reads gets a clean end; one that does not is cut off (its unread data is lost: it resumes)
    if (reason === "overflow" || reason === "stalled") this.res.destroy()
    else this.res.end()
  }
}

/**
 * `GET /v1/projects/{project}/events`: Server-Sent Events (seed 12.5.6, 12.9.3). `retry:` on open, a comment
 * heartbeat every SSE_HEARTBEAT (15 s; load balancer idle timeouts must be longer), and a per-write deadline
 * (SSE_WRITE_DEADLINE, 10 s): a client that stops reading is closed, never waited for.
 */
export const EventsSseLive = Layer.scopedDiscard(Effect.gen(function*() {
  const routes = yield* RawRoutes
  const gateway = yield* EventGateway
  const fence = yield* WriteFence
  const { sseHeartbeat: heartbeat, sseRetryMs: retryMs, writeDeadline: deadline } = yield* StreamSettings.config
  const deadlineMs = Duration.toMillis(deadline)
  const auth = yield* makeStreamAuth
  const revocations = yield* Revocations
  const run = yield* FiberSet.makeRuntime<never>()
  const open = new HeartbeatRing<ServerResponse>(heartbeat)
  const blocked = new WeakSet<ServerResponse>()
  const metrics = transportMetrics("sse")
  const sse: SseShared = { retryMs, deadlineMs, open, blocked, metrics }

  const serve = (req: IncomingMessage, res: ServerResponse) => {
    // the request's trace id: its valid traceparent's, else a new one
    const traceId = traceparentOf(req.headers)?.traceId ?? newTraceId()
    if (req.method !== "GET") {
      res.setHeader("allow", "GET")
      return refuseHttp(res, traceId)(405, "MethodNotAllowed", "use GET")
    }
    req.socket.setNoDelay(true)
    const url = new URL(req.url ?? "/", "http://gateway")
    const transport = new SseTransport(res, traceId, sse)
    let closed: (() => void) | undefined
    let holder: Holder | undefined
    // dropped once it is done: a finished fiber still holds its whole state, and a stream lives for hours. No span
    // per stream: opening one costs ≤ 2 ms of CPU (the trace id still names its log lines and its answer)
    let fiber: Fiber.RuntimeFiber<unknown, unknown> | undefined = run(
      auth.authorize(req, url).pipe(
        Effect.flatMap((request) => {
          holder = request.holder
          return gateway.connect(request, transport)
        }),
        Effect.tap((onClosed) =>
          Effect.sync(() => {
            if (res.destroyed || res.writableEnded) return onClosed()
            // its token revoked: told why, and ended (the gateway lets go of it on the response's close)
            const release = revocations.hold(holder!, "sse", () => res.end(REVOKED_FRAME))
            closed = () => {
              release()
              onClosed()
            }
          })
        ),
        Effect.catchTags({
          StreamRefused: (e) =>
            Effect.sync(() => refuseHttp(res, traceId)(e.status, e._tag, e.message, e.retryAfterSeconds)),
          ProjectNotFound: (e) => Effect.sync(() => refuseHttp(res, traceId)(404, e._tag, e.message)),
          TooManyConnections: (e) =>
            Effect.sync(() => refuseHttp(res, traceId)(429, e._tag, e.message, e.retryAfterSeconds)),
          StorageUnavailable: (e) => Effect.sync(() => refuseHttp(res, traceId)(503, e._tag, e.message))
        }),
        Effect.catchAllCause((cause) =>
          Effect.logError("SSE stream failed", cause).pipe(Effect.zipRight(Effect.sync(() => res.destroy())))
        ),
        withTraceId(traceId)
      )
    )
    if (fiber.unsafePoll() !== null) fiber = undefined
    else fiber.addObserver(() => (fiber = undefined))
    res.once("close", () => {
      if (open.delete(res)) metrics.closed()
      if (closed !== undefined) closed()
      else fiber?.unsafeInterruptAsFork(fiber.id())
    })
  }

  yield* routes.request((path) => EVENTS_PATH.test(path) && !path.endsWith("/ws"), serve)

  // one timer for every client, its writes spread over the interval (HeartbeatRing): a comment line keeps proxies
  // from timing the stream out and finds dead peers. A client backed up (or whose socket is full now) missed its
  // heartbeat: the write deadline decides its fate
  yield* open.beat((res) => {
    if (blocked.has(res) || !res.write(`: ping ${Math.floor(Date.now() / 1000)}\n\n`)) metrics.heartbeatFailed()
  }).pipe(Effect.forkScoped)

  /** Ends a stream still open (a slice reaches it later; it leaves `open` on its close, counted there). */
  const endOpen = (res: ServerResponse, frame?: string) => {
    if (open.has(res) && !res.writableEnded) res.end(frame)
  }

  // live notifications paused (DEGRADED_NOTIFY): every stream is told why, in an `event: mode` frame, and ended (a new
  // stream is refused with 503 naming the mode until pushes resume)
  yield* endStreamsWhileLivePaused(fence, (mode) => {
    const frame = `event: mode\ndata: ${JSON.stringify({ mode, live: false })}\n\n`
    return inSlices(open, (res) => endOpen(res, frame))
  })

  // shutting down: end every stream so that its client reconnects (to another runner) and resumes by cursor; a slice
  // at a time (inSlices): ending 19,500 at once held the event loop for about a second of the handoff
  yield* Effect.addFinalizer(() => inSlices(open, (res) => endOpen(res)))
}))
