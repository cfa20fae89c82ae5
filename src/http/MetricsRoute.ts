/**
 * Where Effect stops: `GET /metrics` is a raw route (RawRoutes.ts). A scrape every few seconds needs no fiber, span
 * or request log line of the platform's pipeline: it reads the registry synchronously (`Metric.unsafeSnapshot`) and
 * writes the text. Off the platform's logger, too: a 1 s scrape interval would otherwise log a line a second.
 */
import { Effect, Layer, Metric, Option, Redacted } from "effect"
import { createHash, timingSafeEqual } from "node:crypto"
import type { IncomingMessage, ServerResponse } from "node:http"
import { metricsScrapes } from "../observability/metrics.js"
import { MetricsSettings } from "../observability/metricsSettings.js"
import { CONTENT_TYPE, encode } from "../observability/Prometheus.js"
import { RawRoutes } from "./RawRoutes.js"

export const METRICS_PATH = "/metrics"

const digest = (text: string) => createHash("sha256").update(text).digest()

/** Compares the bearer token in constant time (both sides hashed first, so their lengths cannot leak either). */
const bearerMatches = (header: string | undefined, expected: Buffer) => {
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header ?? "")
  return match !== null && timingSafeEqual(digest(match[1]!), expected)
}

export const MetricsRouteLive = Layer.scopedDiscard(Effect.gen(function*() {
  const routes = yield* RawRoutes
  const { token } = yield* MetricsSettings.config
  const expected = Option.map(token, (t) => digest(Redacted.value(t)))
  if (Option.isNone(expected)) yield* Effect.logInfo("GET /metrics is open (no METRICS_TOKEN): keep this port internal")

  const answer = (res: ServerResponse, status: number, body: string, headers: Record<string, string> = {}) =>
    res.writeHead(status, { "content-type": "text/plain; charset=utf-8", "cache-control": "no-store", ...headers })
      .end(body)

  const serve = (req: IncomingMessage, res: ServerResponse) => {
    if (req.method !== "GET" && req.method !== "HEAD") return answer(res, 405, "use GET\n", { allow: "GET, HEAD" })
    if (Option.isSome(expected) && !bearerMatches(req.headers.authorization, expected.value)) {
      metricsScrapes.pipe(Metric.tagged("outcome", "unauthorized")).unsafeUpdate(1, [])
      return answer(res, 401, "unauthorized\n", { "www-authenticate": "Bearer realm=\"metrics\"" })
    }
    metricsScrapes.pipe(Metric.tagged("outcome", "ok")).unsafeUpdate(1, [])
    const body = encode(Metric.unsafeSnapshot())
    res.writeHead(200, { "content-type": CONTENT_TYPE, "cache-control": "no-store" })
    res.end(req.method === "HEAD" ? undefined : body)
  }

  yield* routes.request((path) => path === METRICS_PATH, serve)
}))
