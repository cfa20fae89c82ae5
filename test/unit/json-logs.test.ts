import { describe, expect, it } from "@effect/vitest"
import { Cause, ConfigProvider, Effect, Logger, LogLevel } from "effect"
import { jsonLogger, layerLogging } from "../../src/runners/Logging.js"
import { parseTraceparent, traced, withTraceId } from "../../src/tracing/TraceId.js"

/** Runs `effect` with the JSON logger writing into an array: the lines as written. */
const linesOf = <A, E>(effect: Effect.Effect<A, E>) =>
  Effect.gen(function*() {
    const lines: Array<string> = []
    yield* effect.pipe(
      Effect.ignore,
      Effect.provide(Logger.replace(Logger.defaultLogger, Logger.map(jsonLogger, (line) => lines.push(line)))),
      Logger.withMinimumLogLevel(LogLevel.All)
    )
    return lines
  })

describe("LOG_FORMAT=json: one JSON object per line", () => {
  it.effect("annotations are top-level fields, a cause is one string, every line parses alone", () =>
    Effect.gen(function*() {
      const failure = new Error("connection refused\n  at somewhere")
      const lines = yield* linesOf(
        Effect.gen(function*() {
          yield* Effect.logInfo("task queued -> submitting")
          yield* Effect.logWarning("lifecycle step failed; retrying", Cause.die(failure))
          yield* Effect.logError("two parts", { kind: "timeout", big: 10n })
          yield* Effect.logDebug("clashing").pipe(Effect.annotateLogs({ message: "not the message", level: 3 }))
        }).pipe(
          Effect.annotateLogs({ task_id: "t-1", version: 4 }),
          withTraceId("a".repeat(32)),
          Effect.withLogSpan("step")
        )
      )
      expect(lines).toHaveLength(4)
      for (const line of lines) expect(line).not.toContain("\n")
      const [info, warning, error, clash] = lines.map((l) => JSON.parse(l) as Record<string, unknown>)
      expect(info).toMatchObject({
        level: "INFO",
        message: "task queued -> submitting",
        task_id: "t-1",
        version: 4,
        trace_id: "a".repeat(32)
      })
      expect(typeof info!.timestamp).toBe("string")
      expect(info!.spans).toHaveProperty("step")
      expect(warning).toMatchObject({ level: "WARN", task_id: "t-1" })
      expect(String(warning!.cause)).toContain("connection refused")
      expect(String(warning!.cause)).toContain("\n")
      expect(error).toMatchObject({ message: "two parts", details: [{ kind: "timeout", big: "10" }] })
      expect(clash).toMatchObject({
        level: "DEBUG",
        message: "clashing",
        annotations: { message: "not the message", level: 3 }
      })
    }))

  it.effect("a line written in a span without a trace annotation names the span's trace", () =>
    Effect.gen(function*() {
      const lines = yield* linesOf(traced("work", undefined, () => Effect.logInfo("in a new trace")))
      const line = JSON.parse(lines[0]!) as Record<string, unknown>
      expect(line.trace_id).toMatch(/^[0-9a-f]{32}$/)
      expect(line.span_id).toMatch(/^[0-9a-f]{16}$/)
      const parent = parseTraceparent(`00-${"b".repeat(32)}-${"c".repeat(16)}-01`)
      const child = yield* linesOf(traced("work", parent, () => Effect.logInfo("in the caller's trace")))
      expect(JSON.parse(child[0]!)).toMatchObject({ trace_id: "b".repeat(32) })
    }))

  it.effect("LOG_FORMAT is read by the logging layer: json replaces the default logger", () =>
    Effect.gen(function*() {
      const written: Array<string> = []
      const original = console.log
      console.log = (...args: Array<unknown>) => void written.push(args.map(String).join(" "))
      yield* Effect.logInfo("hello").pipe(
        Effect.provide(layerLogging),
        Effect.withConfigProvider(ConfigProvider.fromMap(new Map([["LOG_FORMAT", "json"]]))),
        Effect.ensuring(Effect.sync(() => (console.log = original)))
      )
      expect(written).toHaveLength(1)
      expect(JSON.parse(written[0]!)).toMatchObject({ level: "INFO", message: "hello" })
    }))
})

describe("traceparent (W3C Trace Context)", () => {
  it("a valid header names the caller's span; anything else is ignored", () => {
    const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    expect(parseTraceparent(`00-${trace}-00f067aa0ba902b7-01`)).toMatchObject({
      traceId: trace,
      spanId: "00f067aa0ba902b7",
      sampled: true
    })
    expect(parseTraceparent(`00-${trace}-00f067aa0ba902b7-00`)?.sampled).toBe(false)
    // a later version is read as 00, its extra fields ignored
    expect(parseTraceparent(`01-${trace}-00f067aa0ba902b7-01-extra`)?.traceId).toBe(trace)
    for (
      const bad of [
        undefined,
        "",
        `00-${trace.toUpperCase()}-00f067aa0ba902b7-01`,
        `00-${"0".repeat(32)}-00f067aa0ba902b7-01`,
        `00-${trace}-${"0".repeat(16)}-01`,
        `00-${trace}-00f067aa0ba902b7-01-extra`,
        `ff-${trace}-00f067aa0ba902b7-01`,
        `00-${trace.slice(1)}-00f067aa0ba902b7-01`,
        `00-${trace}-00f067aa0ba902b7`
      ]
    ) {
      expect(parseTraceparent(bad)).toBeUndefined()
    }
  })
})
