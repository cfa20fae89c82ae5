import { HttpClientRequest, HttpRouter, HttpServer, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { describe, expect, it, layer } from "@effect/vitest"
import {
  ConfigProvider,
  Context,
  Effect,
  Either,
  Fiber,
  Layer,
  Logger,
  LogLevel,
  Option,
  Stream,
  TestClock,
  TestContext
} from "effect"
import { createHash } from "node:crypto"
import * as fs from "node:fs/promises"
import { createServer } from "node:http"
import * as os from "node:os"
import * as path from "node:path"
import { layerFilesystem } from "../../src/output/FilesystemStore.js"
import { parseHostPattern } from "../../src/output/hostPatterns.js"
import { probeMp4 } from "../../src/output/mp4Probe.js"
import { ObjectStore } from "../../src/output/ObjectStore.js"
import { HostResolver, OutputDownloader } from "../../src/output/OutputDownloader.js"
import { sampleMp4 } from "../../src/simulator/sampleMp4.js"

const concat = (...parts: ReadonlyArray<Uint8Array>) => Buffer.concat(parts)
const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex")

describe("probeMp4", () => {
  const sample = sampleMp4(4, 100_000)
  // sampleMp4 lays out ftyp (28 bytes), moov (116), mdat
  const [ftyp, moov, mdat] = [sample.subarray(0, 28), sample.subarray(28, 144), sample.subarray(144)]

  it("accepts the sample MP4 with its duration and brand", () => {
    expect(probeMp4(sampleMp4(4))).toEqual(
      Either.right({ majorBrand: "isom", durationSeconds: 4, topLevelBoxes: ["ftyp", "moov", "mdat"] })
    )
  })

  it("rejects a PNG, text and an empty buffer", () => {
    const png = new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13, 0x49, 0x48, 0x44, 0x52])
    expect(probeMp4(png)).toEqual(Either.left("not an MP4: first box is \"\\r\\n\\u001a\\n\""))
    expect(Either.getLeft(probeMp4(new TextEncoder().encode("<html>sorry</html>")))).toEqual(
      Option.some(expect.stringMatching(/^not an MP4: first box is/))
    )
    expect(Either.isLeft(probeMp4(new Uint8Array()))).toBe(true)
  })

  it("rejects a box that overruns the file, trailing bytes, and a file without moov", () => {
    const overrun = Uint8Array.from(sample)
    new DataView(overrun.buffer).setUint32(144, mdat.length + 1)
    expect(Either.getLeft(probeMp4(overrun))).toEqual(Option.some(expect.stringMatching(/"mdat" .*overruns/)))
    expect(Either.getLeft(probeMp4(concat(sample, new Uint8Array(3))))).toEqual(
      Option.some(expect.stringMatching(/3 trailing bytes/))
    )
    expect(probeMp4(concat(ftyp, mdat))).toEqual(Either.left("no moov box"))
  })

  it("reads a prefix when told the real size, and only then", () => {
    const prefix = sample.subarray(0, 500)
    expect(probeMp4(prefix, sample.length)).toEqual(
      Either.right({ majorBrand: "isom", durationSeconds: 4, topLevelBoxes: ["ftyp", "moov", "mdat"] })
    )
    expect(Either.getLeft(probeMp4(prefix))).toEqual(Option.some(expect.stringMatching(/overruns/)))
    // moov cut by the prefix: structure fine so far, duration unknown
    expect(probeMp4(sample.subarray(0, 60), sample.length)).toEqual(
      Either.right({ majorBrand: "isom", durationSeconds: null, topLevelBoxes: ["ftyp", "moov"] })
    )
  })

  it("follows 64-bit sizes, size 0 (to end of file), and says why a non-faststart prefix fails", () => {
    const large = new Uint8Array(16 + 10)
    const view = new DataView(large.buffer)
    view.setUint32(0, 1)
    large.set(new TextEncoder().encode("free"), 4)
    view.setBigUint64(8, BigInt(large.length))
    const toEnd = Uint8Array.from(mdat)
    new DataView(toEnd.buffer).setUint32(0, 0)
    expect(Either.map(probeMp4(concat(ftyp, moov, large, toEnd)), (i) => i.topLevelBoxes)).toEqual(
      Either.right(["ftyp", "moov", "free", "mdat"])
    )
    const moovLast = concat(ftyp, mdat, moov)
    expect(Either.map(probeMp4(moovLast), (i) => i.durationSeconds)).toEqual(Either.right(4))
    expect(Either.getLeft(probeMp4(moovLast.subarray(0, 1000), moovLast.length))).toEqual(
      Option.some(expect.stringMatching(/no moov box in the first 1000 of \d+ bytes.*faststart/))
    )
  })
})

class StoreDir extends Context.Tag("StoreDir")<StoreDir, string>() {}

const StoreDirLive = Layer.scoped(
  StoreDir,
  Effect.acquireRelease(
    Effect.promise(() => fs.mkdtemp(path.join(os.tmpdir(), "object-store-"))),
    (dir) => Effect.promise(() => fs.rm(dir, { recursive: true, force: true }))
  )
)
const StoreLive = Layer.unwrapEffect(Effect.map(StoreDir, layerFilesystem))

/** Every file under the store directory (data, sidecars, temp files), relative to it. */
const filesUnder = (sub: string) =>
  Effect.flatMap(StoreDir, (dir) =>
    Effect.promise(async () => {
      const entries = await fs.readdir(path.join(dir, sub), { recursive: true, withFileTypes: true }).catch(() => [])
      return entries.filter((e) => e.isFile()).map((e) => path.relative(dir, path.join(e.parentPath, e.name)))
    }))

describe("filesystem object store", () => {
  layer(Layer.provideMerge(StoreLive, StoreDirLive))((it) => {
    it.effect("put, head and readRange round-trip; a second put replaces", () =>
      Effect.gen(function*() {
        const store = yield* ObjectStore
        const bytes = sampleMp4(2)
        const chunks = Stream.fromIterable([bytes.subarray(0, 100), bytes.subarray(100)])
        const stored = yield* store.put("t1/a1/output.mp4", chunks, "video/mp4")
        expect(stored).toEqual({
          key: "t1/a1/output.mp4",
          bytes: bytes.length,
          sha256: sha256(bytes),
          contentType: "video/mp4"
        })
        expect(yield* store.head("t1/a1/output.mp4")).toEqual(Option.some(stored))
        expect(yield* store.readRange("t1/a1/output.mp4", 10)).toEqual(bytes.subarray(0, 10))
        expect(yield* store.readRange("t1/a1/output.mp4", 1_000_000)).toEqual(bytes)
        expect(yield* store.head("t1/a2/output.mp4")).toEqual(Option.none())

        const again = yield* store.put("t1/a1/output.mp4", Stream.make(new Uint8Array([1, 2, 3])), "video/mp4")
        expect(yield* store.head("t1/a1/output.mp4")).toEqual(Option.some(again))
        expect(again.bytes).toBe(3)
        expect(yield* filesUnder("t1")).toEqual(["t1/a1/output.mp4", "t1/a1/output.mp4.meta.json"])
      }))

    it.effect("a failing body leaves nothing behind, and the old object stays", () =>
      Effect.gen(function*() {
        const store = yield* ObjectStore
        const old = yield* store.put("t2/a1/output.mp4", Stream.make(new Uint8Array([9])), "video/mp4")
        const failing = Stream.concat(Stream.make(new Uint8Array(5000)), Stream.fail("connection reset" as const))
        expect(yield* Effect.flip(store.put("t2/a1/output.mp4", failing, "video/mp4"))).toBe("connection reset")
        expect(yield* store.head("t2/a1/output.mp4")).toEqual(Option.some(old))
        expect(yield* filesUnder("t2")).toEqual(["t2/a1/output.mp4", "t2/a1/output.mp4.meta.json"])
      }))

    it.effect("rejects keys that escape the root", () =>
      Effect.gen(function*() {
        const store = yield* ObjectStore
        for (const key of ["../x", "a/../../x", "/etc/passwd", "", "a//b", "x.meta.json"]) {
          const error = yield* Effect.flip(store.put(key, Stream.make(new Uint8Array(1)), "video/mp4"))
          expect([key, error._tag]).toEqual([key, "ObjectStoreError"])
        }
        expect((yield* Effect.flip(store.head("../x")))._tag).toBe("ObjectStoreError")
        expect((yield* Effect.flip(store.readRange("../x", 10)))._tag).toBe("ObjectStoreError")
      }))
  })
})

const video = sampleMp4(4)
const LIMIT = 10_000

const router = HttpRouter.empty.pipe(
  HttpRouter.get("/ok.mp4", Effect.succeed(HttpServerResponse.uint8Array(video, { contentType: "video/mp4" }))),
  HttpRouter.get("/page", Effect.succeed(HttpServerResponse.text("<html></html>", { contentType: "text/html" }))),
  // chunked, no Content-Length, never ends: only counting can stop it
  HttpRouter.get(
    "/endless",
    Effect.succeed(HttpServerResponse.stream(
      Stream.repeatValue(new Uint8Array(1000)),
      { contentType: "application/octet-stream" }
    ))
  ),
  HttpRouter.get(
    "/declared-large",
    Effect.succeed(HttpServerResponse.uint8Array(new Uint8Array(LIMIT + 1), { contentType: "video/mp4" }))
  ),
  HttpRouter.get(
    "/stall",
    Effect.succeed(HttpServerResponse.stream(
      Stream.concat(Stream.make(new Uint8Array(100)), Stream.never),
      { contentType: "video/mp4" }
    ))
  ),
  HttpRouter.get("/gone", Effect.succeed(HttpServerResponse.empty({ status: 404 }))),
  HttpRouter.get("/busy", Effect.succeed(HttpServerResponse.empty({ status: 503 }))),
  HttpRouter.get("/denied", Effect.succeed(HttpServerResponse.empty({ status: 403 }))),
  // `/to?url=<url>`: 302 to <url>
  HttpRouter.get(
    "/to",
    Effect.map(HttpServerRequest.HttpServerRequest, (req) =>
      HttpServerResponse.empty({
        status: 302,
        headers: { location: new URL(req.url, "http://x").searchParams.get("url") ?? "/" }
      }))
  ),
  HttpRouter.get("/loop", Effect.succeed(HttpServerResponse.empty({ status: 302, headers: { location: "/loop" } }))),
  // answers the video, remembering the Authorization header it was sent
  HttpRouter.get(
    "/private.mp4",
    Effect.map(HttpServerRequest.HttpServerRequest, (req) => {
      authorizations.push(req.headers["authorization"] ?? null)
      return HttpServerResponse.uint8Array(video, { contentType: "video/mp4" })
    })
  )
)

const authorizations: Array<string | null> = []

class Origin extends Context.Tag("Origin")<Origin, string>() {}

const OriginLive = Layer.scoped(
  Origin,
  Effect.gen(function*() {
    const server = yield* HttpServer.HttpServer
    yield* server.serve(yield* HttpRouter.toHttpApp(router))
    const address = server.address
    return address._tag === "TcpAddress" ? `http://127.0.0.1:${address.port}` : "http://unix"
  })
).pipe(Layer.provide(NodeHttpServer.layer(createServer, { host: "127.0.0.1", port: 0 })))

/**
 * Names only this test knows: `cdn.test` is the origin (loopback, accepted as a simulator's would be), `mixed.test`
 * has a public and a loopback address. Other names go to the system resolver.
 */
const fakeDns: Record<string, ReadonlyArray<{ address: string; family: number }>> = {
  "cdn.test": [{ address: "127.0.0.1", family: 4 }],
  "mixed.test": [{ address: "93.184.216.34", family: 4 }, { address: "127.0.0.1", family: 4 }]
}
const systemResolver = HostResolver.defaultValue()

const DownloaderLive = OutputDownloader.Default.pipe(
  Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(
    new Map([
      ["OUTPUT_MAX_BYTES", String(LIMIT)],
      ["OUTPUT_DOWNLOAD_TIMEOUT", "2 seconds"],
      // the origin is on loopback: accepted for these two names only (not `localhost`)
      ["OUTPUT_PRIVATE_HOSTS", "127.0.0.1,cdn.test"]
    ])
  ))),
  Layer.provide(Layer.succeed(HostResolver, (host) => {
    const answer = fakeDns[host]
    return answer === undefined ? systemResolver(host) : Promise.resolve(answer)
  }))
)

const hosts = (...entries: ReadonlyArray<string>) => entries.map((e) => Either.getOrThrow(parseHostPattern(e)))
const originHosts = hosts("127.0.0.1")

const download = (route: string, key: string) =>
  Effect.gen(function*() {
    const origin = yield* Origin
    return yield* (yield* OutputDownloader).download(HttpClientRequest.get(`${origin}${route}`), key, originHosts)
  })

const failureOf = (route: string, key: string) =>
  Effect.map(Effect.flip(download(route, key)), (e) => ({ kind: e.kind, retryable: e.retryable }))

/** The origin's port, for URLs that name it by another host. */
const originPort = Effect.map(Origin, (o) => new URL(o).port)

describe("OutputDownloader", () => {
  const TestLayer = Layer.mergeAll(OriginLive, DownloaderLive.pipe(Layer.provideMerge(StoreLive))).pipe(
    Layer.provideMerge(StoreDirLive),
    // every test here provokes a warning on purpose
    Layer.provide(Logger.minimumLogLevel(LogLevel.Error))
  )
  layer(TestLayer, { excludeTestServices: true })((it) => {
    it.effect("stores a valid MP4 byte for byte, with its sha256, and it probes as 4 seconds", () =>
      Effect.gen(function*() {
        const stored = yield* download("/ok.mp4", "task-ok/attempt-1/output.mp4")
        expect(stored).toEqual({
          key: "task-ok/attempt-1/output.mp4",
          bytes: video.length,
          sha256: sha256(video),
          contentType: "video/mp4"
        })
        const store = yield* ObjectStore
        expect(yield* store.head(stored.key)).toEqual(Option.some(stored))
        const prefix = yield* store.readRange(stored.key, 1024)
        expect(Either.map(probeMp4(prefix, stored.bytes), (i) => i.durationSeconds)).toEqual(Either.right(4))
        expect(yield* store.readRange(stored.key, video.length + 1)).toEqual(video)
      }))

    it.effect("refuses a content type outside the allow list", () =>
      Effect.gen(function*() {
        expect(yield* failureOf("/page", "task-html/a/output.mp4")).toEqual({ kind: "content_type", retryable: false })
        expect(yield* filesUnder("task-html")).toEqual([])
      }))

    it.effect("cuts off a chunked body past OUTPUT_MAX_BYTES and leaves no object or temp file", () =>
      Effect.gen(function*() {
        expect(yield* failureOf("/endless", "task-big/a/output.mp4")).toEqual({ kind: "too_large", retryable: false })
        expect(yield* (yield* ObjectStore).head("task-big/a/output.mp4")).toEqual(Option.none())
        expect(yield* filesUnder("task-big")).toEqual([])
      }))

    it.effect("refuses a declared Content-Length over the limit before reading", () =>
      Effect.gen(function*() {
        const error = yield* Effect.flip(download("/declared-large", "task-cl/a/output.mp4"))
        expect([error.kind, error.detail]).toEqual(["too_large", "Content-Length 10001 exceeds the 10000-byte limit"])
        expect(yield* filesUnder("task-cl")).toEqual([])
      }))

    // the download timeout runs on the TestClock (the server and the socket are real): no 2 s of waiting
    it.effect("a stalled body times out as a retryable network failure and leaves nothing", () =>
      Effect.gen(function*() {
        const download = yield* Effect.fork(failureOf("/stall", "task-stall/a/output.mp4"))
        // the body has begun (its first 100 bytes are in a temp file), and then the origin goes silent; each step
        // lets the sockets run, and a thousand steps of 1 ms stay below the 2 s timeout
        let started = false
        for (let i = 0; i < 1000 && !started; i++) {
          yield* TestClock.adjust("1 millis")
          started = (yield* filesUnder("task-stall")).length > 0
        }
        expect(started).toBe(true)
        expect(download.unsafePoll()).toBeNull()
        yield* TestClock.adjust("2 seconds")
        expect(yield* Fiber.join(download)).toEqual({ kind: "network", retryable: true })
        expect(yield* filesUnder("task-stall")).toEqual([])
      }).pipe(Effect.provide(TestContext.TestContext)))

    it.effect("classifies 404, 503 and 403", () =>
      Effect.gen(function*() {
        expect(yield* failureOf("/gone", "t/a/o.mp4")).toEqual({ kind: "not_found", retryable: false })
        expect(yield* failureOf("/busy", "t/a/o.mp4")).toEqual({ kind: "http", retryable: true })
        expect(yield* failureOf("/denied", "t/a/o.mp4")).toEqual({ kind: "http", retryable: false })
      }))

    it.effect("a connection refused is a retryable network failure", () =>
      Effect.gen(function*() {
        const error = yield* Effect.flip(
          (yield* OutputDownloader).download(
            HttpClientRequest.get("http://127.0.0.1:1/x.mp4"),
            "t/a/o.mp4",
            originHosts
          )
        )
        expect({ kind: error.kind, retryable: error.retryable }).toEqual({ kind: "network", retryable: true })
      }))

    const fetchFrom = (url: string, allowed: ReadonlyArray<string>, headers: Record<string, string> = {}) =>
      Effect.flatMap(OutputDownloader, (d) =>
        d.download(
          HttpClientRequest.get(url).pipe(HttpClientRequest.setHeaders(headers)),
          `redirect-${crypto.randomUUID()}/a/output.mp4`,
          hosts(...allowed)
        ))
    const refusal = (url: string, allowed: ReadonlyArray<string>) =>
      Effect.map(
        Effect.flip(fetchFrom(url, allowed)),
        (e) => ({ kind: e.kind, retryable: e.retryable, detail: e.detail })
      )

    it.effect("a host outside the provider's list is refused before any request", () =>
      Effect.gen(function*() {
        const port = yield* originPort
        expect(yield* refusal(`http://127.0.0.1:${port}/ok.mp4`, ["storage.cdn-luma.com"])).toEqual({
          kind: "refused",
          retryable: false,
          detail: `127.0.0.1:${port} is not an allowed output host of this provider`
        })
        // a port in the list allows that port only
        expect((yield* refusal(`http://127.0.0.1:${port}/ok.mp4`, ["127.0.0.1:1"])).kind).toBe("refused")
        expect((yield* refusal(`file:///etc/passwd`, ["127.0.0.1"])).detail).toBe("file: URLs are not fetched")
      }))

    it.effect("loopback, private, metadata and mapped addresses are refused whatever their spelling", () =>
      Effect.gen(function*() {
        const port = yield* originPort
        // allowed hosts, but not OUTPUT_PRIVATE_HOSTS: only the address can refuse them
        const cases = [
          [`http://localhost:${port}/ok.mp4`, "localhost", "(loopback)"],
          // 10.0.0.1 spelt as a number: URLs normalize it, and so the list and the check see 10.0.0.1
          ["http://167772161/x.mp4", "10.0.0.1", "10.0.0.1 (private)"],
          [`http://[::ffff:127.0.0.1]:${port}/ok.mp4`, "[::ffff:7f00:1]", "(loopback)"],
          [`http://[::1]:${port}/ok.mp4`, "[::1]", "(loopback)"],
          ["http://169.254.169.254/latest/meta-data/", "169.254.169.254", "(metadata)"],
          ["http://10.1.2.3/x.mp4", "10.1.2.3", "(private)"],
          ["http://0.0.0.0/x.mp4", "0.0.0.0", "(unspecified)"],
          // one loopback address among public ones is enough: the connection could pick it
          [`http://mixed.test:${port}/ok.mp4`, "mixed.test", "resolves to 127.0.0.1 (loopback)"]
        ] as const
        for (const [url, allowed, reason] of cases) {
          const e = yield* refusal(url, [allowed])
          expect([url, e.kind, e.retryable]).toEqual([url, "refused", false])
          expect(e.detail).toContain(reason)
        }
      }))

    it.effect("a name is connected to at the address that was checked (cdn.test exists only in the test's DNS)", () =>
      Effect.gen(function*() {
        const port = yield* originPort
        const stored = yield* fetchFrom(`http://cdn.test:${port}/ok.mp4`, ["cdn.test"])
        expect(stored.sha256).toBe(sha256(video))
      }))

    it.effect("redirects are followed on allowed hosts, each hop checked, our headers kept on the same origin only", () =>
      Effect.gen(function*() {
        const port = yield* originPort
        const origin = `http://127.0.0.1:${port}`
        const to = (url: string) => `${origin}/to?url=${encodeURIComponent(url)}`
        const auth = { authorization: "Bearer our-key" }
        authorizations.length = 0
        // same origin: followed with our header
        expect((yield* fetchFrom(to("/private.mp4"), ["127.0.0.1"], auth)).sha256).toBe(sha256(video))
        // another allowed origin (the same server by another name): followed, without our header
        const other = `http://cdn.test:${port}/private.mp4`
        expect((yield* fetchFrom(to(other), ["127.0.0.1", "cdn.test"], auth)).sha256).toBe(sha256(video))
        expect(authorizations).toEqual(["Bearer our-key", null])

        // to a host not on the list, to loopback by name, to the metadata address: refused, nothing fetched there
        expect((yield* refusal(to(other), ["127.0.0.1"])).detail).toContain("not an allowed output host")
        expect((yield* refusal(to(`http://localhost:${port}/private.mp4`), ["127.0.0.1", "localhost"])).detail)
          .toContain("(loopback)")
        expect(
          (yield* refusal(to("http://169.254.169.254/latest/meta-data/"), ["127.0.0.1", "169.254.169.254"])).detail
        )
          .toContain("(metadata)")
        expect(authorizations).toHaveLength(2)

        // a loop ends after 5 redirects
        expect((yield* refusal(`${origin}/loop`, ["127.0.0.1"])).detail)
          .toBe("more than 5 redirects")
      }))
  })
})
