import {
  Cause,
  Context,
  Effect,
  FiberId,
  FiberRef,
  FiberRefs,
  HashMap,
  HashSet,
  Layer,
  List,
  Logger,
  LogLevel,
  Tracer
} from "effect"
import * as S from "../config/Settings.js"

export const LoggingSettings = S.area("Logging", "what the runner logs", {
  level: S.logLevel(
    "LOG_LEVEL",
    "least severe level logged: ALL, TRACE, DEBUG, INFO, WARN, ERROR, FATAL, OFF (any case)",
    LogLevel.Info
  ),
  format: S.literal(
    "LOG_FORMAT",
    "how a log line is written: pretty (for a terminal), logfmt (key=value, one line each), json (one JSON object " +
      "per line: timestamp, level, message, annotations such as task_id and trace_id as top-level fields, cause as " +
      "one string)",
    ["pretty", "logfmt", "json"],
    "pretty"
  )
})

/** Fields every JSON line has; an annotation of the same name goes under `annotations` instead. */
const RESERVED = new Set(["timestamp", "level", "message", "fiber", "cause", "spans", "details", "annotations"])

/** A value as JSON can hold it: errors by their fields and message, bigints as strings, cycles cut. */
const jsonSafe = (value: unknown): unknown => {
  const seen = new WeakSet<object>()
  const replace = (_: string, v: unknown): unknown => {
    if (typeof v === "bigint") return v.toString()
    if (v instanceof Error) return { ...v, name: v.name, message: v.message }
    if (typeof v === "object" && v !== null) {
      if (seen.has(v)) return "[circular]"
      seen.add(v)
    }
    return v
  }
  try {
    return JSON.parse(JSON.stringify(value, replace) ?? "null")
  } catch {
    return String(value)
  }
}

/**
 * One JSON object per line: `timestamp`, `level`, `message`, `fiber`, every annotation as a top-level field
 * (`task_id`, `trace_id`, `provider` …), `trace_id`/`span_id` of the current span when no annotation named the trace,
 * `spans` (name → ms), further message parts as `details`, and a cause as one string (`cause`): the newlines of
 * a stack trace are escaped inside it, so a line is always one record.
 */
export const jsonLogger: Logger.Logger<unknown, string> = Logger.make(
  ({ annotations, cause, context, date, fiberId, logLevel, message, spans }) => {
    const parts = Array.isArray(message) ? message : [message]
    const [first, ...rest] = parts
    // a cause logged alone (the runtime's report of a failed program) is named by its first line
    const text = first === undefined && !Cause.isEmpty(cause)
      ? Cause.pretty(cause).split("\n", 1)[0]
      : first
    const line: Record<string, unknown> = {
      timestamp: date.toISOString(),
      level: logLevel.label,
      message: typeof text === "string" ? text : jsonSafe(text),
      fiber: FiberId.threadName(fiberId)
    }
    const clashing: Record<string, unknown> = {}
    for (const [key, value] of HashMap.toEntries(annotations)) {
      if (RESERVED.has(key)) clashing[key] = jsonSafe(value)
      else line[key] = jsonSafe(value)
    }
    if (Object.keys(clashing).length > 0) line.annotations = clashing
    const span = Context.getOption(FiberRefs.getOrDefault(context, FiberRef.currentContext), Tracer.ParentSpan)
    if (span._tag === "Some") {
      if (line.trace_id === undefined) line.trace_id = span.value.traceId
      line.span_id = span.value.spanId
    }
    if (rest.length > 0) line.details = rest.map(jsonSafe)
    if (List.isCons(spans)) {
      const now = date.getTime()
      line.spans = Object.fromEntries(List.toArray(spans).map((s) => [s.label, now - s.startTime]))
    }
    if (!Cause.isEmpty(cause)) line.cause = Cause.pretty(cause, { renderErrorCause: true })
    return JSON.stringify(line)
  }
)

// one instance each: the set of loggers holds a logger once however often the layer is built
const consoleLoggers = {
  json: Logger.withConsoleLog(jsonLogger),
  logfmt: Logger.withConsoleLog(Logger.logfmtLogger)
}

/**
 * The log level and format of LOG_LEVEL and LOG_FORMAT. `pretty` keeps the logger the runtime installed (the
 * platform's pretty logger under `npm start`); the others replace it, or Effect's default logger.
 */
export const layerLogging = Layer.unwrapEffect(Effect.map(LoggingSettings.config, (c) => {
  const level = Logger.minimumLogLevel(c.level)
  if (c.format === "pretty") return level
  const chosen = consoleLoggers[c.format]
  return Layer.merge(
    level,
    Layer.scopedDiscard(Effect.locallyScopedWith(FiberRef.currentLoggers, (loggers) =>
      loggers.pipe(
        HashSet.remove(Logger.defaultLogger),
        HashSet.remove(Logger.prettyLoggerDefault),
        HashSet.add(chosen)
      )))
  )
}))
