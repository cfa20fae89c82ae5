import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Effect, Metric } from "effect"
import { build } from "esbuild"
import { fileURLToPath } from "node:url"
import { isLoopbackHost } from "../../config/loopback.js"
import { TokenSigner } from "../Auth.js"
import { opsPageHtml } from "./opsPageHtml.js"

/** Who a development operator token names (audit rows show it). */
export const DEV_OPERATOR = "development"
const DEV_TOKEN_TTL = 8 * 3600

const devTokens = Metric.counter("ops_dev_tokens_issued", {
  description: "operator tokens handed out by the operator page's development-only endpoint (no AUTH_SECRET)"
})

/**
 * The page holds no data, so it is served to anyone; every number on it comes from the admin API with the operator's
 * bearer token. The policy keeps it to this origin (no external resource, no other page may frame its buttons).
 */
const headers = {
  "cache-control": "no-cache",
  "x-content-type-options": "nosniff",
  "content-security-policy":
    "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self'; " +
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  "referrer-policy": "no-referrer"
}

/**
 * A request for a development token must come from this machine's own page: a loopback Host (a DNS-rebinding page
 * names its own host) and, when the browser sends one, an Origin of that same host. Other sites' pages cannot read
 * the answer anyway (no CORS); this keeps a rebinding page from reading it as same-origin.
 */
const fromLocalPage = (request: HttpServerRequest.HttpServerRequest): boolean => {
  const host = request.headers["host"]
  if (host === undefined) return false
  const hostname = host.replace(/:\d+$/, "")
  if (!isLoopbackHost(hostname)) return false
  const origin = request.headers["origin"]
  return origin === undefined || origin === `http://${host}`
}

/**
 * The operator page at `/ops` and its script at `/ops.js` (src/browser/opsApp.ts, bundled once when the runner
 * starts). In development mode only (no AUTH_SECRET) also `POST /ops/dev-token`; with AUTH_SECRET set that route is
 * not registered at all (404), so no configuration mistake can make it hand out operator tokens.
 */
export const OpsPageLive = HttpApiBuilder.Router.use((router) =>
  Effect.gen(function*() {
    const signer = yield* TokenSigner
    const bundle = yield* Effect.promise(() =>
      build({
        entryPoints: [fileURLToPath(new URL("../../browser/opsApp.ts", import.meta.url))],
        bundle: true,
        write: false,
        format: "esm",
        target: "es2020",
        minify: true
      })
    )
    const script = bundle.outputFiles[0]!.text
    const page = opsPageHtml(signer.development)
    yield* router.get(
      "/ops",
      Effect.succeed(HttpServerResponse.html(page).pipe(HttpServerResponse.setHeaders(headers)))
    )
    yield* router.get(
      "/ops.js",
      Effect.succeed(HttpServerResponse.text(script, { contentType: "text/javascript; charset=utf-8", headers }))
    )
    if (!signer.development) return
    yield* router.post(
      "/ops/dev-token",
      Effect.gen(function*() {
        const request = yield* HttpServerRequest.HttpServerRequest
        if (!fromLocalPage(request)) {
          yield* Effect.logWarning("development operator token refused: not this machine's own page").pipe(
            Effect.annotateLogs({ host: request.headers["host"] ?? "", origin: request.headers["origin"] ?? "" })
          )
          return yield* HttpServerResponse.json(
            { _tag: "Forbidden", message: "development tokens are for the page on this machine's loopback address" },
            { status: 403 }
          )
        }
        const token = yield* signer.signOperator(DEV_OPERATOR, DEV_TOKEN_TTL)
        yield* Metric.increment(devTokens)
        yield* Effect.logInfo("development operator token issued to the operator page")
        return yield* HttpServerResponse.json({ token, operator: DEV_OPERATOR, expires_in: DEV_TOKEN_TTL }, { headers })
      }).pipe(Effect.orDie)
    )
  })
)
