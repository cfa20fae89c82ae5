import { Duration, Effect, Layer, Option, Schema, Stream } from "effect"
import { createHash, randomUUID } from "node:crypto"
import * as fs from "node:fs/promises"
import * as path from "node:path"
import {
  checkKey,
  instrument,
  ObjectStore,
  ObjectStoreError,
  type ObjectStoreService,
  type StoredObject
} from "./ObjectStore.js"

const Meta = Schema.parseJson(
  Schema.Struct({ bytes: Schema.Number, sha256: Schema.String, contentType: Schema.String })
)

const META_SUFFIX = ".meta.json"

const attempt = <A>(what: string, key: string, f: () => Promise<A>) =>
  Effect.tryPromise({ try: f, catch: (e) => new ObjectStoreError({ message: `${what} ${key}: ${String(e)}` }) })

const isMissing = (e: unknown) => typeof e === "object" && e !== null && "code" in e && e.code === "ENOENT"

/** `undefined` when the file does not exist; other errors fail. */
const ifExists = <A>(what: string, key: string, f: () => Promise<A>) =>
  Effect.tryPromise({
    try: () => f().catch((e) => (isMissing(e) ? undefined : Promise.reject(e))),
    catch: (e) => new ObjectStoreError({ message: `${what} ${key}: ${String(e)}` })
  })

/**
 * Objects as files under root, each with a `<file>.meta.json` sidecar holding size, sha256 and content type.
 * Data and sidecar go to temp files in the same directory and are renamed into place (sidecar first), so a reader
 * sees either the old object or the new one. A crash between the two renames of a replacing write can pair a new
 * sidecar with old data; `head` then fails on the size check rather than returning a wrong description.
 */
export const makeFilesystem = (root: string): ObjectStoreService => {
  const base = path.resolve(root)

  const resolve = (key: string) => Effect.map(checkKey(key), (segments) => path.join(base, ...segments))

  const writeAll = <E>(file: fs.FileHandle, key: string, body: Stream.Stream<Uint8Array, E>) =>
    Effect.suspend(() => {
      const hash = createHash("sha256")
      let bytes = 0
      return Stream.runForEach(body, (chunk) =>
        attempt("write", key, async () => {
          for (let offset = 0; offset < chunk.length;) {
            offset += (await file.write(chunk, offset, chunk.length - offset)).bytesWritten
          }
          hash.update(chunk)
          bytes += chunk.length
        })).pipe(Effect.map(() => ({ bytes, sha256: hash.digest("hex") })))
    })

  const put = <E>(key: string, body: Stream.Stream<Uint8Array, E>, contentType: string) =>
    Effect.gen(function*() {
      const file = yield* resolve(key)
      yield* attempt("mkdir", key, () => fs.mkdir(path.dirname(file), { recursive: true }))
      const tmp = path.join(path.dirname(file), `.tmp-${randomUUID()}-${path.basename(file)}`)
      const tmpMeta = `${tmp}${META_SUFFIX}`
      return yield* Effect.gen(function*() {
        const { bytes, sha256 } = yield* Effect.acquireUseRelease(
          attempt("open", key, () => fs.open(tmp, "wx")),
          (handle) => writeAll(handle, key, body),
          (handle) => Effect.promise(() => handle.close().catch(() => undefined))
        )
        const meta = Schema.encodeSync(Meta)({ bytes, sha256, contentType })
        yield* attempt("write meta", key, () => fs.writeFile(tmpMeta, meta, { flag: "wx" }))
        yield* attempt("rename meta", key, () => fs.rename(tmpMeta, `${file}${META_SUFFIX}`))
        yield* attempt("rename", key, () => fs.rename(tmp, file))
        return { key, bytes, sha256, contentType } satisfies StoredObject
      }).pipe(
        Effect.onError(() =>
          Effect.promise(() => Promise.all([tmp, tmpMeta].map((f) => fs.rm(f, { force: true }).catch(() => undefined))))
        )
      )
    }).pipe(Effect.withSpan("ObjectStore.put", { attributes: { key } }))

  const head = Effect.fn("ObjectStore.head")(function*(key: string) {
    const file = yield* resolve(key)
    const text = yield* ifExists("read meta", key, () => fs.readFile(`${file}${META_SUFFIX}`, "utf8"))
    const stat = yield* ifExists("stat", key, () => fs.stat(file))
    if (text === undefined || stat === undefined) return Option.none<StoredObject>()
    const meta = yield* Schema.decode(Meta)(text).pipe(
      Effect.mapError((e) => new ObjectStoreError({ message: `corrupt metadata for ${key}: ${e.message}` }))
    )
    if (meta.bytes !== stat.size) {
      return yield* new ObjectStoreError({
        message: `metadata of ${key} says ${meta.bytes} bytes, the file has ${stat.size}`
      })
    }
    return Option.some<StoredObject>({ key, ...meta })
  })

  const readRange = Effect.fn("ObjectStore.readRange")(function*(key: string, maxBytes: number) {
    const file = yield* resolve(key)
    return yield* Effect.acquireUseRelease(
      attempt("open", key, () => fs.open(file, "r")),
      (handle) =>
        attempt("read", key, async () => {
          const buffer = new Uint8Array(Math.max(0, maxBytes))
          let filled = 0
          while (filled < buffer.length) {
            const { bytesRead } = await handle.read(buffer, filled, buffer.length - filled, filled)
            if (bytesRead === 0) break
            filled += bytesRead
          }
          return buffer.subarray(0, filled)
        }),
      (handle) => Effect.promise(() => handle.close().catch(() => undefined))
    )
  })

  const remove = Effect.fn("ObjectStore.delete")(function*(key: string) {
    const file = yield* resolve(key)
    // data first: without its data a sidecar describes nothing (head answers none)
    yield* attempt("delete", key, () => fs.rm(file, { force: true }))
    yield* attempt("delete meta", key, () => fs.rm(`${file}${META_SUFFIX}`, { force: true }))
  })

  return ObjectStore.of({ put, head, readRange, delete: remove })
}

/** The filesystem store rooted at `root`, watched like every store (ObjectStore.instrument). */
export const layerFilesystem = (root: string, timeout: Duration.DurationInput = "30 seconds") =>
  Layer.succeed(ObjectStore, instrument("filesystem", Duration.decode(timeout), makeFilesystem(root)))
