import * as OtlpSerialization from "@effect/opentelemetry/OtlpSerialization"
import * as OtlpTracer from "@effect/opentelemetry/OtlpTracer"
import * as FetchHttpClient from "@effect/platform/FetchHttpClient"
import { Effect, Layer, Option } from "effect"
import * as S from "../config/Settings.js"

export const TracingSettings = S.area("Tracing", "optional export of spans over OTLP (off unless an endpoint is set)", {
  endpoint: S.optionalString(
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTLP/HTTP collector base URL (e.g. http://collector:4318): spans are POSTed as JSON to `<url>/v1/traces`; " +
      "unset, nothing is exported"
  ),
  serviceName: S.string("OTEL_SERVICE_NAME", "`service.name` of the exported spans", "task-status-control-plane"),
  exportInterval: S.duration("OTEL_EXPORT_INTERVAL", "how often batched spans are sent to the collector", "5 seconds")
})

/**
 * Effect's spans (`Effect.fn`, `withSpan`, the HTTP server's) exported over OTLP/HTTP JSON when
 * OTEL_EXPORTER_OTLP_ENDPOINT is set: @effect/opentelemetry's own exporter over an HttpClient, no OpenTelemetry SDK.
 * A request's spans carry its trace id (src/tracing/TraceId.ts), so a trace found by the `trace_id` of a log line or
 * an error body is the trace in the collector. Unset, Effect's in-process tracer stays and nothing leaves.
 */
export const layerTracing = Layer.unwrapEffect(Effect.map(TracingSettings.config, (c) =>
  Option.match(c.endpoint, {
    onNone: () => Layer.empty,
    onSome: (url) =>
      OtlpTracer.layer({
        url: `${url.replace(/\/+$/, "")}/v1/traces`,
        resource: { serviceName: c.serviceName },
        exportInterval: c.exportInterval
      }).pipe(Layer.provide(OtlpSerialization.layerJson), Layer.provide(FetchHttpClient.layer))
  })))
