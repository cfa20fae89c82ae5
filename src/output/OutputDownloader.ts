import { NodeHttpClient } from "@effect/platform-node"
import type * as HttpClientError from "@effect/platform/HttpClientError"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import type * as HttpClientResponse from "@effect/platform/HttpClientResponse"
import { Context, Duration, Effect, Metric, Schema, Stream } from "effect"
import type { LookupAddress } from "node:dns"
import * as dns from "node:dns/promises"
import { isIP, type LookupFunction } from "node:net"
import { classifyAddress, fetchableFrom } from "./addressClass.js"
import { hostAllowed, type HostPattern } from "./hostPatterns.js"
import { ObjectStore, type StoredObject } from "./ObjectStore.js"
import { OutputSettings } from "./outputSettings.js"

/** Why an output could not be brought into our store; `retryable` says whether trying again later can help. */
export class OutputFetchFailed extends Schema.TaggedError<OutputFetchFailed>()("OutputFetchFailed", {
  /** `refused`: the URL, a redirect or an address it resolves to is not one outputs may come from. */
  kind: Schema.Literal("http", "not_found", "too_large", "content_type", "network", "store", "refused"),
  retryable: Schema.Boolean,
  detail: Schema.String
}) {}

const failed = (kind: OutputFetchFailed["kind"], retryable: boolean, detail: string) =>
  new OutputFetchFailed({ kind, retryable, detail })

const requestFailed = (e: HttpClientError.HttpClientError) =>
  // a malformed URL or body will not fix itself
  failed("network", e.reason !== "InvalidUrl" && e.reason !== "Encode", `${e.reason}: ${e.message}`)

const mediaType = (header: string | undefined) => (header ?? "").split(";")[0]!.trim().toLowerCase()

/** How a host name becomes addresses: the system resolver; tests give their own. */
export class HostResolver extends Context.Reference<HostResolver>()("HostResolver", {
  defaultValue: () => (host: string): Promise<ReadonlyArray<LookupAddress>> =>
    dns.lookup(host, { all: true, order: "verbatim" })
}) {}

/** A provider's output URL that is not on its allowed hosts, or that leads to an address we never fetch from. */
const refusedUrls = Metric.counter("output_urls_refused_total", {
  description: "output URLs, redirects included, refused by host or address"
})

const REDIRECTS: ReadonlySet<number> = new Set([301, 302, 303, 307, 308])

/** Redirects followed for one output; CDNs use one or two. */
const MAX_REDIRECTS = 5

/**
 * The connection's own lookup, answering only with the addresses already checked: the socket connects to an
 * address we checked, and a second DNS answer (rebinding) is never asked for.
 */
const pinnedLookup = (addresses: ReadonlyArray<LookupAddress>): LookupFunction => (_host, options, callback) => {
  const family = options.family === 4 || options.family === "IPv4"
    ? 4
    : options.family === 6 || options.family === "IPv6"
    ? 6
    : 0
  const usable = family === 0 ? addresses : addresses.filter((a) => a.family === family)
  const first = usable[0]
  if (first === undefined) {
    callback(Object.assign(new Error("no checked address of this family"), { code: "ENOTFOUND" }), "", 0)
  } else if (options.all === true) {
    callback(null, [...usable])
  } else {
    callback(null, first.address, first.family)
  }
}

/**
 * Copies a provider's output into the ObjectStore: status, content type and size are checked before anything is
 * written, and the body is streamed (never held in memory) with a running byte count, so an oversized body without
 * a Content-Length is cut off as soon as it passes the limit and leaves no object behind.
 *
 * Output URLs come from provider messages, and an unsigned callback is anyone holding its URL: every request, and
 * every redirect (followed here, at most MAX_REDIRECTS), goes only to the provider's allowed hosts, and only to
 * addresses checked after DNS resolution (never loopback, private, link-local, metadata or unspecified ones, but
 * for OUTPUT_PRIVATE_HOSTS). The connection is pinned to the checked addresses by its agent's own lookup, so a
 * DNS answer that changes between the check and the connect (rebinding) is never used. Node's HTTP client, not
 * fetch: fetch follows redirects by itself and resolves names on its own.
 */
export class OutputDownloader extends Effect.Service<OutputDownloader>()("OutputDownloader", {
  effect: Effect.gen(function*() {
    const store = yield* ObjectStore
    const resolve = yield* HostResolver
    const { contentTypes, downloadTimeout: timeout, maxBytes, privateHosts } = yield* OutputSettings.config
    if (privateHosts.length > 0) {
      yield* Effect.logWarning(
        "OUTPUT_PRIVATE_HOSTS is set: outputs may come from loopback or private addresses of these hosts " +
          "(meant for the provider simulator, never for a real provider)"
      ).pipe(Effect.annotateLogs({ hosts: privateHosts.map((h) => `${h.host}:${h.port ?? "*"}`).join(",") }))
    }

    const refuse = (reason: "scheme" | "host" | "address" | "redirects", detail: string) =>
      Metric.increment(Metric.tagged(refusedUrls, "reason", reason)).pipe(
        Effect.zipRight(Effect.fail(failed("refused", false, detail)))
      )

    /**
     * Where one request may go: an http(s) URL on one of the provider's hosts, and every address its host resolves
     * to fetchable (all of them: the connection may pick any). Returns those addresses, to connect to them only.
     */
    const admit = (url: URL, hosts: ReadonlyArray<HostPattern>) =>
      Effect.gen(function*() {
        if (url.protocol !== "http:" && url.protocol !== "https:") {
          return yield* refuse("scheme", `${url.protocol} URLs are not fetched`)
        }
        if (!hostAllowed(hosts, url)) {
          return yield* refuse("host", `${url.host} is not an allowed output host of this provider`)
        }
        const host = url.hostname.replace(/^\[|\]$/g, "")
        const literal = isIP(host)
        const addresses: ReadonlyArray<LookupAddress> = literal !== 0
          ? [{ address: host, family: literal }]
          : yield* Effect.tryPromise({
            try: () => resolve(host),
            catch: (e) => failed("network", true, `resolving ${host}: ${(e as { code?: string }).code ?? String(e)}`)
          })
        const privateAllowed = hostAllowed(privateHosts, url)
        for (const a of addresses) {
          const cls = classifyAddress(a.address)
          if (!fetchableFrom(cls, privateAllowed)) {
            return yield* refuse("address", `${url.host} resolves to ${a.address} (${cls})`)
          }
        }
        if (addresses.length === 0) return yield* failed("network", true, `${host} resolves to no address`)
        return addresses
      })

    /** One request to checked addresses only, on its own agent (no pooled socket to anywhere else). */
    const send = (request: HttpClientRequest.HttpClientRequest, addresses: ReadonlyArray<LookupAddress>) =>
      NodeHttpClient.make.pipe(
        Effect.provideServiceEffect(
          NodeHttpClient.HttpAgent,
          NodeHttpClient.makeAgent({ keepAlive: false, lookup: pinnedLookup(addresses) })
        ),
        Effect.flatMap((client) => client.execute(request)),
        Effect.mapError(requestFailed)
      )

    /**
     * The response at the end of the redirects, each hop admitted like the first. A redirect to another origin
     * carries none of our headers (OpenAI's is our API key).
     */
    const follow = (first: HttpClientRequest.HttpClientRequest, hosts: ReadonlyArray<HostPattern>) =>
      Effect.gen(function*() {
        let request = first
        for (let hop = 0;; hop++) {
          const url = URL.canParse(request.url) ? new URL(request.url) : null
          if (url === null) return yield* failed("network", false, `invalid URL ${request.url}`)
          const response: HttpClientResponse.HttpClientResponse = yield* send(request, yield* admit(url, hosts))
          const location = response.headers["location"]
          if (!REDIRECTS.has(response.status) || location === undefined) return response
          if (hop >= MAX_REDIRECTS) return yield* refuse("redirects", `more than ${MAX_REDIRECTS} redirects`)
          const next = URL.canParse(location, url) ? new URL(location, url) : null
          if (next === null) return yield* refuse("scheme", `redirect to an invalid URL ${location}`)
          yield* Effect.logDebug("output redirected").pipe(Effect.annotateLogs({ to: next.host }))
          const headers = next.origin === url.origin ? request.headers : {}
          request = HttpClientRequest.get(next.href).pipe(HttpClientRequest.setHeaders(headers))
        }
      })

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
      function*(request: HttpClientRequest.HttpClientRequest, key: string, hosts: ReadonlyArray<HostPattern>) {
        yield* Effect.annotateCurrentSpan({ key, url: request.url })
        const response = yield* follow(request, hosts)
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
      /**
       * Downloads the response body of `request` into the object store under `key`, from `hosts` only (the
       * provider's allowed output hosts), redirects included.
       */
      download: (
        request: HttpClientRequest.HttpClientRequest,
        key: string,
        hosts: ReadonlyArray<HostPattern>
      ): Effect.Effect<StoredObject, OutputFetchFailed> => download(request, key, hosts)
    } as const
  })
}) {}
