import { HttpClient, type HttpClientError, type HttpClientRequest } from "@effect/platform"
import { Duration, Effect, Schema, Stream } from "effect"
import { ObjectStore, type StoredObject } from "./ObjectStore.js"
import { OutputSettings } from "./outputSettings.js"

/** Why an output could not be brought into our store; `retryable` says whether trying again later can help. */
export class OutputFetchFailed extends Schema.TaggedError<OutputFetchFailed>()("OutputFetchFailed", {
  kind: Schema.Literal("http", "not_found", "too_large", "content_type", "network", "store"),
  retryable: Schema.Boolean,
  detail: Schema.String
}) {}

const failed = (kind: OutputFetchFailed["kind"], retryable: boolean, detail: string) =>
  new OutputFetchFailed({ kind, retryable, detail })

const requestFailed = (e: HttpClientError.HttpClientError) =>
  // a malformed URL or body will not fix itself
  failed("network", e.reason !== "InvalidUrl" && e.reason !== "Encode", `${e.reason}: ${e.message}`)

const mediaType = (header: string | undefined) => (header ?? "").split(";")[0]!.trim().toLowerCase()

/**
 * Copies a provider's output into the ObjectStore: status, content type and size are checked before anything is
 * written, and the body is streamed (never held in memory) with a running byte count, so an oversized body without
 * a Content-Length is cut off as soon as it passes the limit and leaves no object behind.
 */
export class OutputDownloader extends Effect.Service<OutputDownloader>()("OutputDownloader", {
  effect: Effect.gen(function*() {
    const http = yield* HttpClient.HttpClient
    const store = yield* ObjectStore
    const { contentTypes, downloadTimeout: timeout, maxBytes } = yield* OutputSettings.config

    /** The body, failing once more than maxBytes have arrived or when it ends short of its Content-Length. */
    const limited = <E>(body: Stream.Stream<Uint8Array, E>, declared: number | null) => {
      let received = 0
      return body.pipe(
        Stream.mapEffect((chunk) => {
          received += chunk.length
          return received > maxBytes
            ? Effect.fail(failed("too_large", false, `body passed the ${maxBytes}-byte limit`))
            : Effect.succeed(chunk)
        }),
        Stream.concat(Stream.execute(Effect.suspend(() =>
          declared !== null && received !== declared
            ? Effect.fail(failed("network", true, `body ended after ${received} of ${declared} bytes`))
            : Effect.void
        )))
      )
    }

    const download = Effect.fn("OutputDownloader.download")(
      function*(request: HttpClientRequest.HttpClientRequest, key: string) {
        yield* Effect.annotateCurrentSpan({ key, url: request.url })
        const response = yield* http.execute(request).pipe(Effect.mapError(requestFailed))
        const status = response.status
        if (status === 404 || status === 410) return yield* failed("not_found", false, `HTTP ${status}`)
        if (status < 200 || status >= 300) {
          return yield* failed("http", status >= 500 || status === 429 || status === 408, `HTTP ${status}`)
        }
        const contentType = mediaType(response.headers["content-type"])
        if (!contentTypes.has(contentType)) {
          return yield* failed("content_type", false, `content type ${JSON.stringify(contentType)} is not allowed`)
        }
        const lengthHeader = response.headers["content-length"]
        const declared = lengthHeader !== undefined && /^\d+$/.test(lengthHeader) ? Number(lengthHeader) : null
        if (declared !== null && declared > maxBytes) {
          return yield* failed("too_large", false, `Content-Length ${declared} exceeds the ${maxBytes}-byte limit`)
        }
        const body = limited(
          Stream.mapError(response.stream, (e) => failed("network", true, `reading body: ${e.message}`)),
          declared
        )
        return yield* store.put(key, body, contentType).pipe(
          Effect.catchTag("ObjectStoreError", (e) => failed("store", true, e.message))
        )
      },
      Effect.scoped,
      Effect.timeoutFail({
        duration: timeout,
        onTimeout: () => failed("network", true, `download took longer than ${Duration.format(timeout)}`)
      }),
      (effect, request, key) =>
        effect.pipe(
          Effect.tapError((e) => Effect.logWarning(`output download failed: ${e.kind} (${e.detail})`)),
          Effect.annotateLogs({ object_key: key, url: request.url })
        )
    )

    return {
      /** Downloads the response body of `request` into the object store under `key`. */
      download: (
        request: HttpClientRequest.HttpClientRequest,
        key: string
      ): Effect.Effect<StoredObject, OutputFetchFailed> => download(request, key)
    } as const
  })
}) {}
