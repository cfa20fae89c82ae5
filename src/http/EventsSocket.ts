/**
 * Where Effect stops: the WebSocket transport (the `ws` server on the Node server's upgrade event). Authenticating
 * and replaying run as Effects; an open socket is plain callbacks, for the same per-connection cost as SSE
 * (RawRoutes.ts) and because the platform's WebSocket server has no frame limit, ping or send buffer to watch.
 */
import { Duration, Effect, type Fiber, FiberSet, Layer } from "effect"
import type { IncomingMessage } from "node:http"
import type { Duplex } from "node:stream"
import { type WebSocket, WebSocketServer } from "ws"
import { transportMetrics } from "../gateway/deliveryMetrics.js"
import { EventGateway, type Transport } from "../gateway/EventGateway.js"
import { StreamSettings } from "../gateway/streamSettings.js"
import { framePayload, type StreamEvent } from "../persistence/EventLog.js"
import { WriteFence } from "../persistence/WriteFence.js"
import { newTraceId, withTraceId } from "../tracing/TraceId.js"
import { HeartbeatRing } from "./heartbeatRing.js"
import { inSlices } from "./inSlices.js"
import { endStreamsWhileLivePaused } from "./livePause.js"
import { RawRoutes } from "./RawRoutes.js"
import { Revocations } from "./Revocations.js"
import { EVENTS_PATH, makeStreamAuth, StreamRefused } from "./StreamAuth.js"
import { errorBody, TRACE_HEADER, traceparentOf } from "./TraceIds.js"

const frames = new WeakMap<StreamEvent, string>()
/** The WebSocket message of an event (DESIGN §7), built once per event. */
export const socketFrame = (event: StreamEvent): string => {
  let frame = frames.get(event)
  if (frame === undefined) {
    const { task_id, task_version, ...payload } = framePayload(event)
    frame = JSON.stringify({ type: "task.status", event_id: event.cursor, task_id, task_version, payload })
    frames.set(event, frame)
  }
  return frame
}

const reasons: Record<number, string> = {
  400: "Bad Request",
  401: "Unauthorized",
  403: "Forbidden",
  404: "Not Found",
  429: "Too Many Requests",
  503: "Service Unavailable"
}

/** Refuses an upgrade with a plain HTTP answer (the socket never becomes a WebSocket), as SSE answers. */
const refuseUpgrade =
  (socket: Duplex, traceId: string) => (status: number, tag: string, message: string, retryAfter?: number) => {
    const body = errorBody({ _tag: tag, message }, traceId)
    socket.end(
      `HTTP/1.1 ${status} ${reasons[status] ?? "Error"}\r\nContent-Type: application/json\r\n` +
        `${TRACE_HEADER}: ${traceId}\r\n` +
        (retryAfter === undefined ? "" : `Retry-After: ${retryAfter}\r\n`) +
        `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`
    )
  }

/**
 * `GET /v1/projects/{project}/events/ws`: the same stream, cursor and reset semantics as SSE, as WebSocket
 * messages. Origin is checked before the upgrade; client frames are limited to WS_MAX_FRAME bytes (the client
 * has nothing to say but the protocol's pongs, so 4 KiB); a ping every WS_PING_INTERVAL and a peer that did not
 * pong since the last one is terminated. All writes happen on the one JavaScript thread in event order: one
 * writer per connection. A client whose unsent data passes WS_SEND_BUFFER is treated as backed up.
 */
export const EventsSocketLive = Layer.scopedDiscard(Effect.gen(function*() {
  const routes = yield* RawRoutes
  const gateway = yield* EventGateway
  const fence = yield* WriteFence
  const c = yield* StreamSettings.config
  const { wsMaxFrame: maxFrame, wsPingInterval: pingEvery, wsSendBuffer: sendBuffer, writeDeadline: deadline } = c
  const deadlineMs = Duration.toMillis(deadline)
  const auth = yield* makeStreamAuth
  const revocations = yield* Revocations
  const run = yield* FiberSet.makeRuntime<never>()
  const wss = new WebSocketServer({ noServer: true, maxPayload: maxFrame, perMessageDeflate: false })
  const open = new HeartbeatRing<WebSocket>(pingEvery)
  /** Pinged and not answered yet: the next ping closes it. */
  const unanswered = new WeakSet<WebSocket>()
  // the 101 answer names the request's trace id too
  const traceIds = new WeakMap<IncomingMessage, string>()
  wss.on("headers", (headers, req) => {
    const traceId = traceIds.get(req)
    if (traceId !== undefined) headers.push(`${TRACE_HEADER}: ${traceId}`)
  })
  const metrics = transportMetrics("ws")

  const transportOf = (ws: WebSocket, socket: Duplex): Transport => ({
    open: () => undefined,
    send: (event) => {
      ws.send(socketFrame(event))
      metrics.delivered(event)
      return ws.bufferedAmount < sendBuffer
    },
    reset: (problem, cursor) => {
      ws.send(JSON.stringify({ type: "reset", event_id: cursor, reason: problem }))
      return ws.bufferedAmount < sendBuffer
    },
    whenDrained: (f, stalled) => {
      const timer = setTimeout(() => {
        socket.off("drain", drained)
        socket.off("close", gone)
        stalled()
      }, deadlineMs)
      const gone = () => clearTimeout(timer)
      const drained = () => {
        if (ws.bufferedAmount >= sendBuffer) return void socket.once("drain", drained)
        clearTimeout(timer)
        socket.off("close", gone)
        f()
      }
      socket.once("drain", drained)
      socket.once("close", gone)
    },
    close: (reason) => {
      if (reason === "overflow" || reason === "stalled") ws.terminate()
      else ws.close(reason === "shutdown" ? 1001 : 1012, reason)
    }
  })

  /** Upgrades once authorized; ws does not call back when it refuses (bad headers, socket gone): fail then. */
  const upgrade = (req: IncomingMessage, socket: Duplex, head: Buffer) =>
    Effect.async<WebSocket, StreamRefused>((resume) => {
      if (socket.destroyed) return resume(Effect.fail(new StreamRefused({ status: 400, message: "socket closed" })))
      wss.handleUpgrade(req, socket, head, (ws) => resume(Effect.succeed(ws)))
    })

  const watch = (ws: WebSocket) => {
    open.add(ws)
    metrics.opened()
    ws.on("pong", () => unanswered.delete(ws))
    ws.on("message", () => undefined) // nothing to act on; oversized frames are refused by the limit
    // a protocol violation (oversized frame, bad UTF-8): ws has closed it with 1009/1007; an "error" event
    // without a listener would throw and take the whole runner down
    ws.on("error", (e) => run(Effect.logWarning("WebSocket client broke the protocol", e.message)))
    ws.once("close", () => open.delete(ws) && metrics.closed())
  }

  const serve = (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const url = new URL(req.url ?? "/", "http://gateway")
    // the request's trace id: its valid traceparent's, else a new one (no span per stream: see EventsSse.ts)
    const traceId = traceparentOf(req.headers)?.traceId ?? newTraceId()
    traceIds.set(req, traceId)
    // whatever step the request is in when its socket goes (authorizing, upgrading, replaying), it ends there
    let closed: (() => void) | undefined
    // dropped once it is done: a finished fiber still holds its whole state, and a stream lives for hours
    let fiber: Fiber.RuntimeFiber<unknown, unknown> | undefined = run(
      auth.authorize(req, url).pipe(
        // another tenant's project (404) and a user or tenant over its stream limits (429 with Retry-After) are
        // refused before the upgrade, like SSE; a place in the limits is held from here, given back if the upgrade fails
        Effect.flatMap((request) =>
          gateway.admit(request, (admission) =>
            Effect.flatMap(upgrade(req, socket, head), (ws) => {
              watch(ws)
              return gateway.open(admission, transportOf(ws, socket)).pipe(
                Effect.tap((onClosed) =>
                  Effect.sync(() => {
                    if (socket.destroyed) return onClosed()
                    // its token revoked: closed with 4401 (the application's "unauthorized"; a reconnect gets 401)
                    const release = revocations.hold(request.holder, "ws", () => ws.close(4401, "token revoked"))
                    closed = () => {
                      release()
                      onClosed()
                    }
                  })
                )
              )
            }))
        ),
        Effect.catchTags({
          StreamRefused: (e) => Effect.sync(() => refuseUpgrade(socket, traceId)(e.status, e._tag, e.message)),
          ProjectNotFound: (e) => Effect.sync(() => refuseUpgrade(socket, traceId)(404, e._tag, e.message)),
          TooManyConnections: (e) =>
            Effect.sync(() => refuseUpgrade(socket, traceId)(429, e._tag, e.message, e.retryAfterSeconds)),
          StorageUnavailable: (e) => Effect.sync(() => refuseUpgrade(socket, traceId)(503, e._tag, e.message))
        }),
        Effect.catchAllCause((cause) =>
          Effect.logError("WebSocket stream failed", cause).pipe(Effect.zipRight(Effect.sync(() => socket.destroy())))
        ),
        withTraceId(traceId)
      )
    )
    if (fiber.unsafePoll() !== null) fiber = undefined
    else fiber.addObserver(() => (fiber = undefined))
    socket.once("close", () => {
      if (closed !== undefined) closed()
      else fiber?.unsafeInterruptAsFork(fiber.id())
    })
  }

  yield* routes.upgrade((path) => EVENTS_PATH.test(path) && path.endsWith("/ws"), serve)

  // one timer for every socket, its pings spread over the interval (HeartbeatRing)
  yield* open.beat((ws) => {
    if (unanswered.has(ws)) {
      metrics.heartbeatFailed()
      ws.terminate()
      return
    }
    unanswered.add(ws)
    ws.ping()
  }).pipe(Effect.forkScoped)

  // live notifications paused (DEGRADED_NOTIFY): as on SSE, every socket is told why in a `mode` message and closed
  // with 1013 (try again later); a new one is refused with 503 naming the mode until pushes resume
  yield* endStreamsWhileLivePaused(fence, (mode) => {
    const message = JSON.stringify({ type: "mode", mode, live: false })
    return inSlices(open, (ws) => {
      if (!open.has(ws) || ws.readyState !== ws.OPEN) return
      ws.send(message)
      ws.close(1013, "live notifications paused")
    })
  })

  // a slice at a time, as on SSE
  yield* Effect.addFinalizer(() =>
    inSlices(open, (ws) => open.has(ws) && ws.close(1001, "shutdown")).pipe(
      Effect.zipRight(Effect.sync(() => wss.close()))
    )
  )
}))
