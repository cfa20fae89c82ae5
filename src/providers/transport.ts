import * as HttpBody from "@effect/platform/HttpBody"
import type * as HttpClient from "@effect/platform/HttpClient"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import type * as HttpClientResponse from "@effect/platform/HttpClientResponse"
import { Duration, Effect, Either, Metric, Option, Schema, type Scope } from "effect"
import { providerResponses } from "../observability/metrics.js"
import { seriesBy } from "../observability/series.js"
import { ProviderCallFailed, SubmitRejected, SubmitUnknown } from "./errors.js"

type Method = "GET" | "POST" | "PUT" | "DELETE"

/**
 * One HTTP transport for every provider, rather than each SDK's own: one timeout (PROVIDER_TIMEOUT) over the whole
 * call, its answer's body included, that interrupts it, no hidden retries (a retried submit could be a second generation), our Idempotency-Key on
 * every submit, and one classification of failures into ProviderCallFailed kinds, with Retry-After.
 */
export interface Transport {
  /** A call whose listed non-2xx statuses are answers (with a body), not failures. */
  readonly call: <A, I>(
    method: Method,
    path: string,
    schema: Schema.Schema<A, I>,
    options?: { readonly body?: unknown; readonly answers?: ReadonlyArray<number> }
  ) => Effect.Effect<{ readonly status: number; readonly body: A }, ProviderCallFailed>
  /** A call whose answer has no body we need (a cancel: Runway and Luma answer 204 No Content). */
  readonly send: (method: Method, path: string) => Effect.Effect<void, ProviderCallFailed>
  /** A submission: no response or a 5xx is SubmitUnknown (it may exist), any other refusal SubmitRejected. */
  readonly submit: <A, I>(
    path: string,
    body: unknown,
    schema: Schema.Schema<A, I>,
    idOf: (a: A) => string,
    idempotencyKey: string
  ) => Effect.Effect<{ readonly providerTaskId: string }, SubmitRejected | SubmitUnknown>
  /** A GET with our credentials (outputs a provider serves itself). */
  readonly authorized: (path: string) => HttpClientRequest.HttpClientRequest
}

const retryAfterOf = (res: HttpClientResponse.HttpClientResponse) => {
  const seconds = Number(res.headers["retry-after"])
  return Number.isFinite(seconds) && seconds >= 0 ? Option.some(Duration.seconds(seconds)) : Option.none()
}

const classify = (res: HttpClientResponse.HttpClientResponse): ProviderCallFailed | null =>
  res.status < 300 ? null : new ProviderCallFailed({
    kind: res.status === 429
      ? "rate_limited"
      : res.status === 404
      ? "not_found"
      : res.status === 401 || res.status === 403
      ? "auth"
      : "server",
    retryAfter: retryAfterOf(res),
    detail: `HTTP ${res.status}`,
    status: res.status
  })

/**
 * A multipart form is encoded here (by the platform's Response, as fetch would), then sent as bytes: the client is
 * undici's own (Runner.ts), which does not take the global FormData (measured: every OpenAI submit failed).
 */
const withBody = (req: HttpClientRequest.HttpClientRequest, body: unknown) =>
  body === undefined
    ? Effect.succeed(req)
    : body instanceof FormData
    ? Effect.promise(async () => {
      const encoded = new Response(body)
      const bytes = new Uint8Array(await encoded.arrayBuffer())
      return HttpClientRequest.setBody(req, HttpBody.uint8Array(bytes, encoded.headers.get("content-type")!))
    })
    : Effect.succeed(HttpClientRequest.setBody(req, HttpBody.unsafeJson(body)))

/** What the provider said when it refused a submission: its message, for logs only (never public). */
const refusalDetail = (res: HttpClientResponse.HttpClientResponse) =>
  res.text.pipe(Effect.map((t) => t.slice(0, 500)), Effect.orElseSucceed(() => ""))

export const makeTransport = (options: {
  /** The provider's name, as a label of provider_http_responses_total. */
  readonly provider: string
  readonly http: HttpClient.HttpClient
  readonly baseUrl: string
  readonly headers: Record<string, string>
  readonly timeout: Duration.Duration
}): Transport => {
  const responses = seriesBy(providerResponses, "provider", "status")
  const authorized = (path: string) =>
    HttpClientRequest.get(`${options.baseUrl}${path}`).pipe(HttpClientRequest.setHeaders(options.headers))

  const network = responses(options.provider, "network")
  const timedOut = `TimeoutException: no complete answer within ${Duration.format(options.timeout)} (PROVIDER_TIMEOUT)`

  /**
   * A request and what `read` makes of its answer, all within PROVIDER_TIMEOUT: the headers, the body and its
   * decoding. With only the headers bounded, an answer whose body stalled after them held the call (a poll, with its
   * lease; a submit) for undici's bodyTimeout, 300 s. `failed`: what no answer, or none complete in time, is to the
   * caller. Every answer is counted by its status; no answer (refused, reset, or no headers in time) as `network`.
   */
  const exchange = <A, E, R>(
    method: Method,
    path: string,
    body: unknown,
    key: string | undefined,
    failed: (detail: string) => E,
    read: (res: HttpClientResponse.HttpClientResponse) => Effect.Effect<A, R, Scope.Scope>
  ): Effect.Effect<A, E | R> =>
    Effect.suspend(() => {
      let req = HttpClientRequest.make(method)(`${options.baseUrl}${path}`).pipe(
        HttpClientRequest.setHeaders(options.headers)
      )
      if (key !== undefined) req = HttpClientRequest.setHeader(req, "idempotency-key", key)
      let answered = false
      return Effect.flatMap(withBody(req, body), options.http.execute).pipe(
        Effect.tap((res) => {
          answered = true
          return Metric.increment(responses(options.provider, String(res.status)))
        }),
        Effect.mapError((e) => failed(String(e))),
        Effect.flatMap(read),
        Effect.timeoutFail({ duration: options.timeout, onTimeout: () => failed(timedOut) }),
        Effect.tapError(() => answered ? Effect.void : Metric.increment(network)),
        Effect.scoped
      )
    })

  const unreachable = (detail: string) => new ProviderCallFailed({ kind: "network", retryAfter: Option.none(), detail })

  const call: Transport["call"] = (method, path, schema, o = {}) =>
    exchange(method, path, o.body, undefined, unreachable, (res) => {
      const failed = (o.answers ?? []).includes(res.status) ? null : classify(res)
      if (failed !== null) return Effect.fail(failed)
      return res.json.pipe(
        Effect.flatMap(Schema.decodeUnknown(schema)),
        Effect.map((decoded) => ({ status: res.status, body: decoded })),
        Effect.mapError((e) =>
          new ProviderCallFailed({ kind: "malformed", retryAfter: Option.none(), detail: String(e) })
        )
      )
    })

  const sendVoid: Transport["send"] = (method, path) =>
    exchange(method, path, undefined, undefined, unreachable, (res) => {
      const failed = classify(res)
      return failed === null ? Effect.void : Effect.fail(failed)
    })

  const submit: Transport["submit"] = (path, body, schema, idOf, key) =>
    // no answer, or none read in time: the request may have been processed
    exchange(
      "POST",
      path,
      body,
      key,
      (reason) => new SubmitUnknown({ reason }),
      (res): Effect.Effect<{ providerTaskId: string }, SubmitRejected | SubmitUnknown> => {
        if (res.status >= 500 || res.status === 408) {
          return Effect.fail(new SubmitUnknown({ reason: `HTTP ${res.status}`, status: res.status }))
        }
        if (res.status >= 300) {
          return Effect.flatMap(
            refusalDetail(res),
            (detail) => Effect.fail(new SubmitRejected({ code: `http_${res.status}`, detail }))
          )
        }
        return res.json.pipe(
          Effect.flatMap(Schema.decodeUnknown(schema)),
          Effect.map((a) => ({ providerTaskId: idOf(a) })),
          // accepted, but we cannot read what: treat as unknown and resolve by query
          Effect.mapError((e) => new SubmitUnknown({ reason: `unreadable submit response: ${e}`, status: res.status }))
        )
      }
    )

  return { call, send: sendVoid, submit, authorized }
}

/** A request the provider would refuse, refused before it is sent (no call, so no doubt about a generation). */
export const refuseUnless = <A>(
  checked: Either.Either<A, string>,
  send: (a: A) => Effect.Effect<{ readonly providerTaskId: string }, SubmitRejected | SubmitUnknown>
) =>
  Either.match(checked, {
    onLeft: (detail) => Effect.fail(new SubmitRejected({ code: "unsupported_request", detail })),
    onRight: send
  })

/**
 * Our duration (whole seconds) as the provider's: the shortest allowed clip at least as long as asked, so the user
 * never gets less than they paid for; longer than the provider's longest is refused.
 */
export const atLeast =
  <const D extends ReadonlyArray<number>>(allowed: D) => (seconds: number): Either.Either<D[number], string> => {
    const fit = [...allowed].sort((a, b) => a - b).find((d) => d >= seconds)
    return fit === undefined
      ? Either.left(`duration ${seconds} s: this model offers ${allowed.join(", ")} s`)
      : Either.right(fit)
  }

/** Only whether a request can be sent (a definition's `check`). */
export const allowed = <A>(checked: Either.Either<A, string>): Either.Either<void, string> =>
  Either.map(checked, () => undefined)
