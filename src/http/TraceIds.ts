import * as HttpApp from "@effect/platform/HttpApp"
import * as HttpBody from "@effect/platform/HttpBody"
import * as HttpMiddleware from "@effect/platform/HttpMiddleware"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Effect, Metric } from "effect"
import type { IncomingHttpHeaders } from "node:http"
import { isTraceId, newTraceId, parseTraceparent, withTraceId } from "../tracing/TraceId.js"

/** The response header that returns a request's trace id, on every answer (API, webhooks, streams). */
export const TRACE_HEADER = "x-trace-id"

const invalidTraceparents = Metric.counter("traceparent_invalid_total", {
  description:
    "requests whose traceparent header was not valid W3C Trace Context (ignored: each got a trace id of its own)",
  incremental: true
})

/** The caller's span a `traceparent` names; an invalid one is counted (a client or proxy to fix) and ignored. */
const callerSpan = (header: string | undefined) => {
  const span = parseTraceparent(header)
  if (header !== undefined && span === undefined) invalidTraceparents.unsafeUpdate(1, [])
  return span
}

/** The parent span a raw request names in a valid `traceparent` (Node gives a repeated header as an array). */
export const traceparentOf = (headers: IncomingHttpHeaders) => {
  const value = headers.traceparent
  return callerSpan(Array.isArray(value) ? value[0] : value)
}

/** A JSON error body with the trace id in it: every error answer carries it (DESIGN §6: codes plus trace_id). */
export const errorBody = (body: Record<string, unknown>, traceId: string): string =>
  JSON.stringify({ ...body, trace_id: traceId })

const decoder = new TextDecoder()

/** The API's answer with its trace id: the header always, and in the body of an error (added to its JSON object). */
const stamp = (response: HttpServerResponse.HttpServerResponse, traceId: string) => {
  const res = HttpServerResponse.setHeader(response, TRACE_HEADER, traceId)
  if (res.status < 400) return res
  const body = res.body
  if (body._tag === "Empty") {
    return HttpServerResponse.setBody(res, HttpBody.text(errorBody({}, traceId), "application/json"))
  }
  if (body._tag !== "Uint8Array" || !body.contentType.startsWith("application/json")) return res
  try {
    const parsed: unknown = JSON.parse(decoder.decode(body.body))
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return res
    return HttpServerResponse.setBody(
      res,
      HttpBody.text(errorBody(parsed as Record<string, unknown>, traceId), body.contentType)
    )
  } catch {
    return res
  }
}

/**
 * Gives every API request its trace id: the W3C `traceparent`'s when it is valid, else the trace id of the
 * request's span (the platform's tracer starts it as the child of that traceparent, else as a new root), so the
 * id is the trace id of every span of the request. Its log lines carry `trace_id`, handlers read it with
 * `currentTraceId`, and the answer returns it: the `x-trace-id` header, and `trace_id` in an error's JSON body.
 */
export const traceIds = HttpMiddleware.make((app) =>
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const parent = callerSpan(request.headers.traceparent)
    const span = yield* Effect.orElseSucceed(Effect.currentSpan, () => undefined)
    const traceId = parent?.traceId ?? (span !== undefined && isTraceId(span.traceId) ? span.traceId : newTraceId())
    yield* HttpApp.appendPreResponseHandler((_, response) => Effect.succeed(stamp(response, traceId)))
    return yield* withTraceId(traceId)(app)
  })
)
