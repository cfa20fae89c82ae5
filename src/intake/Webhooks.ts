import { type HttpApp, HttpIncomingMessage, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Data, Duration, Effect, Either, Option } from "effect"
import * as S from "../config/Settings.js"
import { dedupKeyOf, sha256hex } from "../providers/ProviderAdapter.js"
import { ProviderRegistry } from "../providers/ProviderRegistry.js"
import { CallbackInbox } from "./CallbackInbox.js"

class BodyTooLarge extends Data.TaggedError("BodyTooLarge") {}
class BodyTimeout extends Data.TaggedError("BodyTimeout") {}

const status = (code: number, error?: string) =>
  error === undefined
    ? HttpServerResponse.empty({ status: code })
    : HttpServerResponse.unsafeJson({ error }, { status: code })

export const WebhookSettings = S.area("Webhook gateway", "receiving provider callbacks at /webhooks/{provider}", {
  maxBytes: S.integer("WEBHOOK_MAX_BYTES", "largest callback body accepted (413 above)", 256 * 1024, { min: 1 }),
  readTimeout: S.duration("WEBHOOK_READ_TIMEOUT", "how long a callback body may take to arrive", "10 seconds")
})

/** Reads the raw body, refusing more than `maxBytes` while it streams in and giving up after `timeout`. */
const readBody = (request: HttpServerRequest.HttpServerRequest, maxBytes: number, timeout: Duration.Duration) =>
  request.arrayBuffer.pipe(
    HttpIncomingMessage.withMaxBodySize(Option.some(maxBytes)),
    Effect.mapError((e) =>
      e.cause instanceof Error && e.cause.message === "maxBytes exceeded" ? new BodyTooLarge() : new BodyTimeout()
    ),
    Effect.map((buffer) => new Uint8Array(buffer)),
    Effect.timeoutFail({ duration: timeout, onTimeout: () => new BodyTimeout() })
  )

/**
 * POST /webhooks/{provider}: verify the raw bytes, persist to the inbox, answer. Fast and dumb: no provider
 * work and no task work happens here. 204 only after the row (or its earlier duplicate) is committed;
 * 401 with no detail for any signature problem; 400 for a body that is not the provider's format;
 * 404 for an unknown provider; 413 above the size limit; 415 for a non-JSON body; 503 when PostgreSQL is down.
 */
export class WebhookGateway extends Effect.Service<WebhookGateway>()("WebhookGateway", {
  effect: Effect.gen(function*() {
    const registry = yield* ProviderRegistry
    const inbox = yield* CallbackInbox
    const { maxBytes, readTimeout } = yield* WebhookSettings.config

    const handle = Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const url = new URL(request.url, "http://gateway")
      const provider = WEBHOOK_PATH.exec(url.pathname)?.[1]
      if (provider === undefined) return status(404, "unknown provider")
      if (request.method !== "POST") return status(405, "POST only")
      const endpoint = registry.webhookEndpoint(provider)
      if (Option.isNone(endpoint)) return status(404, "unknown provider")
      const contentType = request.headers["content-type"] ?? ""
      if (!/^application\/json\s*(;|$)/i.test(contentType)) return status(415, "expected application/json")
      const declared = Number(request.headers["content-length"] ?? "0")
      if (declared > maxBytes) return status(413, "body too large")

      const body = yield* readBody(request, maxBytes, readTimeout).pipe(Effect.either)
      if (Either.isLeft(body)) {
        return body.left._tag === "BodyTooLarge" ? status(413, "body too large") : status(408, "body timeout")
      }
      const verified = yield* endpoint.value.verify({
        headers: request.headers,
        query: url.searchParams,
        body: body.right
      })
      if (Either.isLeft(verified)) {
        yield* Effect.logWarning("webhook refused").pipe(Effect.annotateLogs({ provider, reason: verified.left }))
        return status(401)
      }

      const text = Buffer.from(body.right).toString("utf8")
      const json = Either.try(() => JSON.parse(text) as unknown)
      const report = Either.flatMap(
        Either.mapLeft(json, () => "not JSON"),
        endpoint.value.protocol.parse
      )
      if (Either.isLeft(report)) return status(400, `malformed ${provider} webhook: ${report.left}`)
      // a signature over a request id (fal) covers only the body that names the same request
      const subject = verified.right.subject
      if (subject !== undefined && subject !== report.right.providerTaskId) return status(401)

      const payloadHash = sha256hex(body.right)
      const stored = yield* inbox.store({
        provider,
        dedupKey: dedupKeyOf(verified.right.eventId, report.right, payloadHash),
        providerEventId: verified.right.eventId,
        providerTaskId: report.right.providerTaskId,
        clientRequestId: report.right.clientRequestId,
        attemptId: endpoint.value.protocol.scheme === "callback-token" ? url.searchParams.get("attempt") : null,
        providerOccurredAt: verified.right.timestamp ?? report.right.providerUpdatedAt,
        signatureKeyVersion: verified.right.keyVersion,
        payloadHash,
        body: text
      }).pipe(Effect.either)
      if (Either.isLeft(stored)) return status(503, "unavailable")
      return status(204)
    })

    return { handle } as const
  })
}) {}

const WEBHOOK_PATH = /^\/webhooks\/([a-z][a-z0-9_-]{0,31})\/?$/

/**
 * Serves /webhooks/* before the API's router and middleware (access log, span, error encoding): provider
 * callbacks are the hottest path and need none of it. Everything else goes to `app`.
 */
export const routeWebhooks = (gateway: WebhookGateway) => <E, R>(app: HttpApp.Default<E, R>) =>
  Effect.flatMap(
    HttpServerRequest.HttpServerRequest,
    (request): Effect.Effect<HttpServerResponse.HttpServerResponse, E, R | HttpServerRequest.HttpServerRequest> =>
      request.url.startsWith("/webhooks/") ? gateway.handle : app
  )
