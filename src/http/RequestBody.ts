/**
 * Where Effect stops: reading a JSON API request body from the Node request, by plain listeners. The platform's
 * reader had no limit here (a 32 MB prompt was buffered whole: 25 s and +190 MB of RSS), and with one
 * (`HttpIncomingMessage.withMaxBodySize`) it destroys the request when the limit is passed, which resets the
 * connection: the client never sees the 413. This reader stops keeping bytes at the limit, lets Node discard the
 * rest, and the 413 goes out with `Connection: close`.
 */
import { NodeHttpServerRequest } from "@effect/platform-node"
import { HttpApiDecodeError } from "@effect/platform/HttpApiError"
import * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Effect, Either, Metric, ParseResult, Schema } from "effect"
import { PayloadTooLarge } from "../schema/errors.js"

/** Requests the API refused before any work, by reason (body_too_large, invalid_body). */
export const refusedRequests = Metric.counter("api_refused_requests", {
  description: "JSON API requests refused at the edge, by reason",
  incremental: true
})

const refused = (reason: string) => Metric.increment(Metric.tagged(refusedRequests, "reason", reason))

const tooLarge = (maxBytes: number) =>
  new PayloadTooLarge({ message: `the request body is larger than ${maxBytes} bytes` })

/** Connection: close on the answer: the rest of an oversized body is not waited for on a kept-alive connection. */
const closeAfterAnswer = HttpApp.appendPreResponseHandler((_request, response) =>
  Effect.succeed(HttpServerResponse.setHeader(response, "connection", "close"))
)

const refuseTooLarge = (maxBytes: number, declared: number | undefined) =>
  Effect.logWarning("API request body too large: refused").pipe(
    Effect.annotateLogs({ limit: maxBytes, declared: declared ?? "chunked" }),
    Effect.zipRight(refused("body_too_large")),
    Effect.zipRight(closeAfterAnswer)
  )

/**
 * In front of the whole API: a body declared (Content-Length) over `maxBytes` is 413 before anything reads it,
 * whatever the endpoint. A body without a declared length is limited while it is read (`readJson`).
 */
export const limitDeclaredBodies = (maxBytes: number) => <E, R>(app: HttpApp.Default<E, R>) =>
  Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
    const declared = Number(request.headers["content-length"] ?? "0")
    if (!(declared > maxBytes)) return app
    const { message } = tooLarge(maxBytes)
    return Effect.as(
      refuseTooLarge(maxBytes, declared),
      HttpServerResponse.unsafeJson({ _tag: "PayloadTooLarge", message }, { status: 413 })
    )
  })

/** The raw bytes of the body, failing as soon as more than `maxBytes` have arrived (the rest is discarded). */
const readBytes = (request: HttpServerRequest.HttpServerRequest, maxBytes: number) =>
  Effect.async<Buffer, "too large" | "unreadable">((resume) => {
    const source = NodeHttpServerRequest.toIncomingMessage(request)
    const chunks: Array<Buffer> = []
    let bytes = 0
    const detach = () => {
      source.off("data", onData)
      source.off("end", onEnd)
      source.off("error", onError)
      source.off("close", onClose)
    }
    const onData = (chunk: Buffer) => {
      bytes += chunk.length
      if (bytes <= maxBytes) return void chunks.push(chunk)
      detach()
      chunks.length = 0
      // flowing with no listener: Node reads and drops the rest until the connection closes after the 413
      source.resume()
      resume(Effect.fail("too large"))
    }
    const onEnd = () => {
      detach()
      resume(Effect.succeed(Buffer.concat(chunks)))
    }
    const onError = () => {
      detach()
      resume(Effect.fail("unreadable"))
    }
    const onClose = () => {
      if (!source.complete) onError()
    }
    source.on("data", onData)
    source.once("end", onEnd)
    source.once("error", onError)
    source.once("close", onClose)
    return Effect.sync(detach)
  })

/** How much of any value or key a 400 quotes back, and how many problems it lists. */
const QUOTE = 120
const MAX_ISSUES = 20

const shorten = (text: string) => text.length <= QUOTE ? text : `${text.slice(0, QUOTE)}…`

/** A 400 listing every problem, each quoting at most a short prefix of the value (a 1 MB value got a 2 MB answer). */
const decodeError = (issues: ReadonlyArray<ParseResult.ArrayFormatterIssue>) => {
  const shown = issues.slice(0, MAX_ISSUES).map((issue): HttpApiDecodeError["issues"][number] => ({
    _tag: issue._tag,
    path: issue.path.map((key) => shorten(String(key))),
    message: shorten(issue.message)
  }))
  const lines = shown.map((issue) => `${issue.path.length === 0 ? "body" : issue.path.join(".")}: ${issue.message}`)
  if (issues.length > shown.length) lines.push(`and ${issues.length - shown.length} more`)
  return new HttpApiDecodeError({ issues: shown, message: lines.join("; ") })
}

const notJson = decodeError([{ _tag: "Type" as const, path: [], message: "the body is not valid JSON" }])

/**
 * Reads and decodes a JSON body with `schema`: 413 past `maxBytes` (while it streams in), 400 for a body that is
 * not JSON, or that `schema` refuses, with every problem at once (unknown fields included) and no long echo.
 */
export const readJson = <A, I>(schema: Schema.Schema<A, I>, maxBytes: number) => {
  const decode = Schema.decodeUnknownEither(schema, { errors: "all", onExcessProperty: "error" })
  return Effect.fn("RequestBody.readJson")(function*(request: HttpServerRequest.HttpServerRequest) {
    const bytes = yield* Effect.either(readBytes(request, maxBytes))
    if (Either.isLeft(bytes)) {
      if (bytes.left === "unreadable") return yield* Effect.interrupt
      yield* refuseTooLarge(maxBytes, undefined)
      return yield* tooLarge(maxBytes)
    }
    const text = bytes.right.toString("utf8")
    const json = Either.try(() => text.length === 0 ? null : JSON.parse(text) as unknown)
    const decoded = Either.isLeft(json)
      ? Either.left(notJson)
      : Either.mapLeft(decode(json.right), (e) => decodeError(ParseResult.ArrayFormatter.formatErrorSync(e)))
    if (Either.isLeft(decoded)) {
      yield* Effect.logDebug("API request body refused").pipe(Effect.annotateLogs("problems", decoded.left.message))
      yield* refused("invalid_body")
      return yield* decoded.left
    }
    return decoded.right
  })
}
