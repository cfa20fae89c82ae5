/**
 * Where Effect stops: reading a provider callback's body, and answering it. In the platform's pipeline the
 * webhook route ran before the router, uninterruptibly (HttpApp.toHandled), so `Effect.timeoutFail` could cut
 * neither the body read nor the JWKS fetch: a body declared as 100 bytes that sent 5 was answered after 328 s
 * (Node's requestTimeout), a trickled one only at its last byte, and an oversized chunked body had its socket
 * destroyed with unread input (a reset, never the 413). Here the body is read with a running byte count and a
 * deadline timer on the Node request itself; Effect runs (interruptibly) once the bytes are in: verify, decode,
 * store (src/intake/Webhooks.ts).
 *
 * Per webhook, only what must be done: no span unless the caller's traceparent samples the trace (the trace id is
 * still answered, logged and stored with the row), no new URL() (the query is split off by hand), and no fiber for a
 * callback verified at once and stored as it is (WebhookGateway.receive): its row joins the inbox's next batch and
 * the answer goes out when the batch commits. With the fiber gone, bench:webhooks' runner went from 2,429 to 3,577/s
 * (medians of 3; CPU per webhook 0.37 -> 0.24 ms, the bare-Node ceiling's 0.07-0.10 ms in the same runs).
 */
import { Duration, Effect, Either, FiberSet, Layer } from "effect"
import type { IncomingMessage, ServerResponse } from "node:http"
import { WEBHOOK_PREFIX, type WebhookAnswer, WebhookGateway, WebhookSettings } from "../intake/Webhooks.js"
import { newTraceId, traced, withTraceId } from "../tracing/TraceId.js"
import { RawRoutes } from "./RawRoutes.js"
import { errorBody, TRACE_HEADER, traceparentOf } from "./TraceIds.js"

type BodyRead =
  | { readonly _tag: "Body"; readonly bytes: Uint8Array }
  | { readonly _tag: "TooLarge" }
  | { readonly _tag: "Timeout" }
  | { readonly _tag: "Gone" }

/**
 * Reads `req`'s body, counting as it streams in: more than `maxBytes` is TooLarge at once (chunked bodies declare
 * no length), nothing complete by `deadline` (epoch ms) is Timeout, a connection lost first is Gone.
 */
const readBody = (req: IncomingMessage, maxBytes: number, deadline: number, done: (read: BodyRead) => void) => {
  let chunks: Array<Buffer> = []
  let size = 0
  let finished = false
  const finish = (read: BodyRead) => {
    if (finished) return
    finished = true
    clearTimeout(timer)
    chunks = []
    req.off("data", onData)
    done(read)
  }
  const onData = (chunk: Buffer) => {
    size += chunk.length
    if (size > maxBytes) return finish({ _tag: "TooLarge" })
    chunks.push(chunk)
  }
  const timer = setTimeout(() => finish({ _tag: "Timeout" }), Math.max(0, deadline - Date.now()))
  req.on("data", onData)
  req.once("end", () => finish({ _tag: "Body", bytes: Buffer.concat(chunks, size) }))
  req.once("error", () => finish({ _tag: "Gone" }))
  req.once("close", () => finish({ _tag: "Gone" }))
}

/** Node gives repeated headers as arrays (only set-cookie, for requests): joined, as a proxy would. */
const headersOf = (req: IncomingMessage): Record<string, string | undefined> => {
  const headers: Record<string, string | undefined> = {}
  for (const [name, value] of Object.entries(req.headers)) {
    headers[name] = Array.isArray(value)
      ? value.join(", ")
      : value
  }
  return headers
}

/**
 * How much of a refused body is still read (and dropped) after the answer, so the client reads the answer before
 * the socket closes: closing a socket with unread input sends a reset, which can overtake the answer.
 */
const lingerBytes = (maxBytes: number) => Math.max(1024 * 1024, 4 * maxBytes)

export const WebhookRouteLive = Layer.scopedDiscard(Effect.gen(function*() {
  const routes = yield* RawRoutes
  const gateway = yield* WebhookGateway
  const { maxBytes, readTimeout } = yield* WebhookSettings.config
  const timeoutMs = Duration.toMillis(readTimeout)
  const run = yield* FiberSet.makeRuntime<never>()

  /**
   * Writes the answer. "keep": the body was read, the connection stays open for the next request. "close": ends
   * the connection with the answer (Connection: close; Node closes the socket once the answer is flushed). "linger":
   * a refusal before the body was read: the answer is sent at once with Connection: close, the body still
   * arriving is read and dropped (up to `lingerBytes`, no later than `deadline`), and the connection closes after it;
   * past either bound the socket is destroyed.
   */
  const answer = (
    req: IncomingMessage,
    res: ServerResponse,
    a: WebhookAnswer,
    mode: "keep" | "close" | "linger",
    deadline: number,
    traceId: string
  ) => {
    if (res.headersSent || res.destroyed) return
    // a refusal names its trace id (a signature refusal only that: no detail for a forger)
    const body = a.status < 400 ? "" : errorBody(a.error === undefined ? {} : { error: a.error }, traceId)
    res.writeHead(a.status, {
      "content-length": Buffer.byteLength(body),
      ...(body === "" ? {} : { "content-type": "application/json" }),
      [TRACE_HEADER]: traceId,
      ...(mode === "keep" ? {} : { connection: "close" })
    })
    if (mode !== "linger" || req.complete) return void res.end(body)
    res.write(body)
    let dropped = 0
    const cut = () => {
      clearTimeout(timer)
      req.socket.destroy()
    }
    const timer = setTimeout(cut, Math.max(0, deadline - Date.now()))
    req.on("data", (chunk: Buffer) => {
      dropped += chunk.length
      if (dropped > lingerBytes(maxBytes)) cut()
    })
    req.once("end", () => {
      clearTimeout(timer)
      res.end()
    })
    req.once("close", () => clearTimeout(timer))
    req.resume()
  }

  /**
   * Each request is the work of one trace: its valid `traceparent`'s, else a new one. What is answered before any
   * Effect runs (the path, the method, the media type) gets its id here; the rest runs in the request's span.
   */
  const serve = (req: IncomingMessage, res: ServerResponse) => {
    const deadline = Date.now() + timeoutMs
    // the path and query split by hand: new URL() per webhook, for a query only callback-token providers read
    const target = req.url ?? "/"
    const q = target.indexOf("?")
    const pathname = q === -1 ? target : target.slice(0, q)
    const headers = headersOf(req)
    const parent = traceparentOf(req.headers)
    // the caller's trace, else a new one; a sampled caller's also gets a span (traced), with the same trace id
    const traceId = parent?.traceId ?? newTraceId()
    const admitted = gateway.admit(pathname, req.method ?? "GET", headers)
    if (Either.isLeft(admitted)) return answer(req, res, admitted.left, "linger", deadline, traceId)
    const provider = admitted.right.provider
    /** Runs the work making the answer, under the request's trace id (in a span when the caller samples it). */
    const respond = (mode: "keep" | "close" | "linger", work: (traceId: string) => Effect.Effect<WebhookAnswer>) => {
      const reply = (id: string) =>
        work(id).pipe(
          Effect.catchAllCause((cause) =>
            Effect.as(Effect.logError("webhook failed", cause), { status: 500, error: "internal error" })
          ),
          Effect.map((a) => answer(req, res, a, mode, deadline, id)),
          Effect.annotateLogs({ provider })
        )
      // a span only when the caller samples its trace: one per webhook cost more than the rest of the Effect part
      void run(
        parent?.sampled === true ? traced("Webhooks.receive", parent, reply) : withTraceId(traceId)(reply(traceId))
      )
    }
    const tooLarge = () => respond("linger", () => gateway.refused(provider, 413, "too_large", "body too large"))
    if (Number(headers["content-length"] ?? "0") > maxBytes) return tooLarge()
    readBody(req, maxBytes, deadline, (read) => {
      switch (read._tag) {
        case "Gone":
          return
        case "TooLarge":
          return tooLarge()
        case "Timeout":
          // the client is slow or stalled: answered at the deadline, and the connection closed with it
          return respond("close", () => gateway.refused(provider, 408, "read_timeout", "body timeout"))
        case "Body": {
          const request = {
            headers,
            query: new URLSearchParams(q === -1 ? "" : target.slice(q + 1)),
            body: read.bytes
          }
          if (parent?.sampled === true) return respond("keep", (id) => gateway.handle(admitted.right, request, id))
          // no fiber unless the work needs one (WebhookGateway.receive)
          return gateway.receive(
            admitted.right,
            request,
            traceId,
            (a) => Effect.isEffect(a) ? respond("keep", () => a) : answer(req, res, a, "keep", deadline, traceId)
          )
        }
      }
    })
  }

  yield* routes.request((path) => path.startsWith(WEBHOOK_PREFIX), serve)
}))
