import { Effect, FiberRef, Tracer } from "effect"
import { randomBytes, randomFillSync } from "node:crypto"

/**
 * The trace id of a unit of work (a request, a webhook, a poll round): 32 lowercase hex digits, as W3C Trace
 * Context defines it. It is the trace id of the work's spans too, so an OTLP export and the logs, the
 * task_events rows and the SSE frames name the same trace.
 */
const TRACE_ID = /^[0-9a-f]{32}$/
const SPAN_ID = /^[0-9a-f]{16}$/
const FLAGS = /^[0-9a-f]{2}$/

// random bytes drawn 4 KiB at a time: randomBytes(16) per id cost a syscall-sized call per webhook
const pool = Buffer.alloc(4096)
let used = pool.length
export const newTraceId = (): string => {
  if (used === pool.length) {
    randomFillSync(pool)
    used = 0
  }
  used += 16
  return pool.toString("hex", used - 16, used)
}

export const isTraceId = (id: string): boolean => TRACE_ID.test(id) && id !== "0".repeat(32)

/**
 * The caller's span named by a W3C `traceparent` header, when it is valid: version 00 (exactly four fields) or a
 * later version (read as 00, extra fields ignored); lowercase hex; neither id all zeros. Anything else is ignored,
 * as the specification asks, and the work starts a trace of its own.
 */
export const parseTraceparent = (header: string | undefined): Tracer.ExternalSpan | undefined => {
  if (header === undefined) return undefined
  const parts = header.trim().split("-")
  const [version, traceId, spanId, flags] = parts
  if (version === undefined || traceId === undefined || spanId === undefined || flags === undefined) return undefined
  if (!FLAGS.test(version) || version === "ff" || (version === "00" && parts.length !== 4)) return undefined
  if (!isTraceId(traceId) || !SPAN_ID.test(spanId) || spanId === "0".repeat(16) || !FLAGS.test(flags)) {
    return undefined
  }
  return Tracer.externalSpan({ traceId, spanId, sampled: (parseInt(flags, 16) & 1) === 1 })
}

/** The trace id of the work this fiber does (set by `traced` / `withTraceId`); undefined outside any. */
export const currentTraceIdRef: FiberRef.FiberRef<string | undefined> = FiberRef.unsafeMake<string | undefined>(
  undefined
)

/** The work's trace id, or a new one for work that started none (it is then that work's own). */
export const currentTraceId: Effect.Effect<string> = Effect.map(
  FiberRef.get(currentTraceIdRef),
  (id) => id ?? newTraceId()
)

/** Runs `effect` as the work of `traceId`: every log line it writes carries `trace_id`, and it reads the id back. */
export const withTraceId = (traceId: string) => <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  effect.pipe(Effect.annotateLogs("trace_id", traceId), Effect.locally(currentTraceIdRef, traceId))

/**
 * Runs the work `f` in a span named `name`: the child of `parent` (the caller's traceparent, or a trace id carried
 * by a stored row), else the root of a new trace. The span's trace id is the work's trace id, given to `f`, put on
 * its log lines and readable with `currentTraceId`.
 */
export const traced = <A, E, R>(
  name: string,
  parent: Tracer.AnySpan | undefined,
  f: (traceId: string) => Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> =>
  Effect.flatMap(Effect.orElseSucceed(Effect.currentSpan, () => undefined), (span) => {
    // a tracer that makes no real ids (disabled) still gets a trace id of ours
    const traceId = span !== undefined && isTraceId(span.traceId) ? span.traceId : parent?.traceId ?? newTraceId()
    return withTraceId(traceId)(f(traceId))
  }).pipe(Effect.withSpan(name, parent === undefined ? { root: true } : { parent }))

/**
 * The parent span for work resumed from a stored trace id (an inbox row): its spans join that trace. The caller's
 * span id was not stored, so the parent is named by a span id of its own (a collector shows it as a missing
 * parent, under the right trace).
 */
export const resumedSpan = (traceId: string): Tracer.ExternalSpan | undefined =>
  isTraceId(traceId)
    ? Tracer.externalSpan({ traceId, spanId: randomBytes(8).toString("hex"), sampled: true })
    : undefined
