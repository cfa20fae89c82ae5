import { describe, expect, layer } from "@effect/vitest"
import { Effect, Either, Layer, Metric, Option, Stream } from "effect"
import { createHash } from "node:crypto"
import * as fs from "node:fs/promises"
import * as os from "node:os"
import * as path from "node:path"
import { objectStoreOperations } from "../../src/observability/metrics.js"
import { ObjectStore } from "../../src/output/ObjectStore.js"
import { layerFromEnv } from "../../src/output/ObjectStoreLive.js"
import { sampleMp4 } from "../../src/simulator/sampleMp4.js"
import { withSettings } from "../../src/testing/TestRunner.js"
import { scaled } from "../support/env.js"
import { layerS3rver, S3RVER_KEY, silentListener, TestS3 } from "../support/s3.js"

const sha256 = (b: Uint8Array) => createHash("sha256").update(b).digest("hex")
const PART = 5 * 1024 * 1024

/** Both stores as the runner builds them: from the settings (ObjectStoreLive.layerFromEnv). */
const Filesystem = Layer.unwrapScoped(Effect.map(
  Effect.acquireRelease(
    Effect.promise(() => fs.mkdtemp(path.join(os.tmpdir(), "object-store-contract-"))),
    (dir) => Effect.promise(() => fs.rm(dir, { recursive: true, force: true }))
  ),
  (dir) => layerFromEnv.pipe(Layer.provide(withSettings({ OBJECT_STORE: "filesystem", OBJECT_STORE_DIR: dir })))
))
const S3 = Layer.unwrapEffect(Effect.map(
  TestS3,
  (s) => layerFromEnv.pipe(Layer.provide(withSettings({ ...s.settings, S3_PART_SIZE: String(PART) })))
)).pipe(Layer.provide(layerS3rver()))

/** A body in uneven chunks, as a download arrives. */
const chunked = (bytes: Uint8Array, size: number) =>
  Stream.fromIterable(
    Array.from({ length: Math.ceil(bytes.length / size) }, (_, i) => bytes.subarray(i * size, (i + 1) * size))
  )

const failure = <A, E>(effect: Effect.Effect<A, E>) => Effect.map(Effect.either(effect), Either.getLeft)

const contract = (name: string, store: Layer.Layer<ObjectStore, unknown>) =>
  describe(`object store contract: ${name}`, () => {
    layer(store, { timeout: scaled(60_000), excludeTestServices: true })((it) => {
      it.effect("put, head and a ranged read round-trip; a second put replaces; a missing key is none", () =>
        Effect.gen(function*() {
          const s = yield* ObjectStore
          const bytes = sampleMp4(2)
          const stored = yield* s.put("t1/a1/output.mp4", chunked(bytes, 100), "video/mp4")
          expect(stored).toEqual({
            key: "t1/a1/output.mp4",
            bytes: bytes.length,
            sha256: sha256(bytes),
            contentType: "video/mp4"
          })
          expect(yield* s.head("t1/a1/output.mp4")).toEqual(Option.some(stored))
          expect(yield* s.readRange("t1/a1/output.mp4", 10)).toEqual(bytes.subarray(0, 10))
          expect(yield* s.readRange("t1/a1/output.mp4", 1 << 20)).toEqual(bytes)
          expect(yield* s.head("t1/missing/output.mp4")).toEqual(Option.none())
          expect(Option.isSome(yield* failure(s.readRange("t1/missing/output.mp4", 10)))).toBe(true)

          const again = yield* s.put(
            "t1/a1/output.mp4",
            Stream.make(new Uint8Array([1, 2, 3])),
            "application/octet-stream"
          )
          expect(again.bytes).toBe(3)
          expect(yield* s.head("t1/a1/output.mp4")).toEqual(Option.some(again))
          expect(yield* s.readRange("t1/a1/output.mp4", 10)).toEqual(new Uint8Array([1, 2, 3]))
        }))

      it.effect("an empty object, and delete (twice: deleting a missing object succeeds)", () =>
        Effect.gen(function*() {
          const s = yield* ObjectStore
          const empty = yield* s.put("t2/a1/output.mp4", Stream.empty, "video/mp4")
          expect(empty.bytes).toBe(0)
          // (no ranged read of it: s3rver answers bytes=0-9 of an empty object with a 206 it cannot fill; S3 says 416)
          expect(yield* s.head("t2/a1/output.mp4")).toEqual(Option.some(empty))
          yield* s.delete("t2/a1/output.mp4")
          expect(yield* s.head("t2/a1/output.mp4")).toEqual(Option.none())
          yield* s.delete("t2/a1/output.mp4")
        }))

      it.effect("a body larger than a part (an S3 multipart upload) arrives whole, with its sha256", () =>
        Effect.gen(function*() {
          const s = yield* ObjectStore
          const bytes = new Uint8Array(2 * PART + 12_345).map((_, i) => (i * 7) & 255)
          const stored = yield* s.put("t3/a1/output.mp4", chunked(bytes, 64 * 1024), "video/mp4")
          expect(stored.sha256).toBe(sha256(bytes))
          expect(yield* s.head("t3/a1/output.mp4")).toEqual(Option.some(stored))
          expect(yield* s.readRange("t3/a1/output.mp4", 1000)).toEqual(bytes.subarray(0, 1000))
        }))

      it.effect("a body that fails midway leaves the old object as it was, and no new one", () =>
        Effect.gen(function*() {
          const s = yield* ObjectStore
          const old = yield* s.put("t4/a1/output.mp4", Stream.make(new Uint8Array([9, 9])), "video/mp4")
          const broken = Stream.concat(chunked(new Uint8Array(PART + 10), 1 << 20), Stream.fail("connection reset"))
          expect(yield* failure(s.put("t4/a1/output.mp4", broken, "video/mp4"))).toEqual(
            Option.some("connection reset")
          )
          expect(yield* s.head("t4/a1/output.mp4")).toEqual(Option.some(old))
          expect(yield* failure(s.put("t4/a2/output.mp4", broken, "video/mp4"))).toEqual(
            Option.some("connection reset")
          )
          expect(yield* s.head("t4/a2/output.mp4")).toEqual(Option.none())
        }))

      it.effect("keys that are not plain relative paths are refused", () =>
        Effect.gen(function*() {
          const s = yield* ObjectStore
          for (const key of ["", "/abs", "a//b", "a/../b", "./a", "a\\b", "x.meta.json"]) {
            const e = yield* failure(s.head(key))
            expect(Option.map(e, (x) => x.reason), key).toEqual(Option.some("invalid_key"))
          }
        }))
    })
  })

contract("filesystem", Filesystem)
contract("s3 (s3rver)", S3)

describe("object store: a silent S3 endpoint", () => {
  // real time: the timeout is the subject, and it is measured against the real network
  layer(Layer.empty, { timeout: scaled(60_000), excludeTestServices: true })((it) => {
    it.scoped("every operation fails with a timeout, counted as one", () =>
      Effect.gen(function*() {
        const endpoint = yield* silentListener
        const timeouts = objectStoreOperations.pipe(
          Metric.tagged("store", "s3"),
          Metric.tagged("op", "head"),
          Metric.tagged("outcome", "timeout")
        )
        const before = (yield* Metric.value(timeouts)).count
        const store = layerFromEnv.pipe(Layer.provide(withSettings({
          OBJECT_STORE: "s3",
          S3_BUCKET: "outputs",
          S3_ENDPOINT: endpoint,
          S3_ACCESS_KEY_ID: S3RVER_KEY,
          S3_SECRET_ACCESS_KEY: S3RVER_KEY,
          S3_FORCE_PATH_STYLE: "true",
          OBJECT_STORE_TIMEOUT: "300 millis"
        })))
        const s = yield* Effect.provide(ObjectStore, store)
        const reasons = yield* Effect.all([
          failure(s.head("t/a/output.mp4")),
          failure(s.readRange("t/a/output.mp4", 10)),
          failure(s.delete("t/a/output.mp4")),
          failure(s.put("t/a/output.mp4", Stream.make(new Uint8Array([1])), "video/mp4"))
        ]).pipe(Effect.map((es) => es.map((e) => Option.map(e, (x) => (x as { reason?: string }).reason))))
        expect(reasons).toEqual(Array(4).fill(Option.some("timeout")))
        expect((yield* Metric.value(timeouts)).count).toBe(before + 1)
      }))
  })
})

describe("object store settings", () => {
  layer(Layer.empty)((it) => {
    it.effect("OBJECT_STORE=s3 without a bucket, or half a key pair, is refused with the variable named", () =>
      Effect.gen(function*() {
        const build = (settings: Record<string, string>) =>
          Effect.scoped(Layer.build(layerFromEnv.pipe(Layer.provide(withSettings(settings))))).pipe(
            Effect.flip,
            Effect.map(String)
          )
        expect(yield* build({ OBJECT_STORE: "s3" })).toMatch(/S3_BUCKET: OBJECT_STORE=s3 needs the bucket/)
        expect(yield* build({ S3_BUCKET: "b", S3_ACCESS_KEY_ID: "k" })).toMatch(/S3_SECRET_ACCESS_KEY are set together/)
        expect(yield* build({ S3_BUCKET: "b", S3_ENDPOINT: "not a url" })).toMatch(/S3_ENDPOINT: not a URL/)
      }))
  })
})
