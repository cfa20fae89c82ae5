import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CopyObjectCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  PutObjectCommand,
  S3Client,
  UploadPartCommand
} from "@aws-sdk/client-s3"
import { Duration, Effect, Layer, Option, Redacted, type Scope, Stream } from "effect"
import { createHash, randomUUID } from "node:crypto"
import { checkKey, instrument, ObjectStore, ObjectStoreError, type ObjectStoreService } from "./ObjectStore.js"
import type { ObjectStoreConfig } from "./objectStoreSettings.js"

export type S3Options =
  & Pick<
    ObjectStoreConfig,
    "endpoint" | "region" | "accessKeyId" | "secretAccessKey" | "forcePathStyle" | "prefix" | "partSize" | "timeout"
  >
  & { readonly bucket: string }

/** Our metadata on each object: S3 keeps size and type itself, the sha256 (computed while writing) is ours. */
const SHA256 = "sha256"

const statusOf = (e: unknown) =>
  typeof e === "object" && e !== null && "$metadata" in e
    ? (e.$metadata as { httpStatusCode?: number }).httpStatusCode
    : undefined

const describe = (e: unknown) =>
  e instanceof Error ? `${e.name}: ${e.message}${statusOf(e) === undefined ? "" : ` (HTTP ${statusOf(e)})`}` : String(e)

const concat = (chunks: ReadonlyArray<Uint8Array>, total: number) => {
  const out = new Uint8Array(total)
  let at = 0
  for (const c of chunks) {
    out.set(c, at)
    at += c.length
  }
  return out
}

/**
 * An S3-compatible bucket (AWS S3, MinIO, R2, Ceph, s3rver), shared by every runner: an output fetched on one host is
 * there for the probe on another after a shard move.
 *
 * Every request has OBJECT_STORE_TIMEOUT and is aborted at it. `put` streams: a body up to S3_PART_SIZE is one
 * PutObject with the sha256 in its metadata; a larger one is a multipart upload to a key under `.incoming/`, one part
 * in memory at a time, then copied (server side) to its key with the sha256 — a multipart upload's metadata is fixed
 * before its bytes are seen — so the object appears under its key only whole and described. An upload that fails is
 * aborted; a crash may leave an incomplete upload or an `.incoming/` object behind (a bucket lifecycle rule on
 * `.incoming/` and on incomplete multipart uploads cleans them). CopyObject copies up to 5 GB: OUTPUT_MAX_BYTES must
 * stay below that for this store.
 */
export const makeS3 = (o: S3Options): Effect.Effect<ObjectStoreService, never, Scope.Scope> =>
  Effect.gen(function*() {
    const timeoutMs = Duration.toMillis(o.timeout)
    const client = yield* Effect.acquireRelease(
      Effect.sync(() =>
        new S3Client({
          region: o.region,
          forcePathStyle: o.forcePathStyle,
          ...(Option.isSome(o.endpoint) ? { endpoint: o.endpoint.value } : {}),
          ...(Option.isSome(o.accessKeyId) && Option.isSome(o.secretAccessKey)
            ? {
              credentials: {
                accessKeyId: Redacted.value(o.accessKeyId.value),
                secretAccessKey: Redacted.value(o.secretAccessKey.value)
              }
            }
            : {}),
          // our own timeout aborts each request; the SDK's connect timeout only makes a dead host fail sooner
          requestHandler: { connectionTimeout: timeoutMs },
          // retries happen above (a failed fetch is retried with backoff); one attempt keeps the timeout's meaning
          maxAttempts: 1,
          // checksums only where S3 requires them: S3-compatible stores differ on the newer CRC headers
          requestChecksumCalculation: "WHEN_REQUIRED",
          responseChecksumValidation: "WHEN_REQUIRED"
        })
      ),
      (c) => Effect.sync(() => c.destroy())
    )
    const full = (key: string) => `${o.prefix}${key}`

    /** One request, aborted when it passes the timeout (or when the caller is interrupted). */
    const send = <A>(what: string, key: string, f: (signal: AbortSignal) => Promise<A>) =>
      Effect.tryPromise({
        try: f,
        catch: (e) => new ObjectStoreError({ message: `${what} ${key}: ${describe(e)}` })
      }).pipe(
        Effect.timeoutFail({
          duration: o.timeout,
          onTimeout: () =>
            new ObjectStoreError({
              message: `${what} ${key}: no answer within ${Duration.format(o.timeout)}`,
              reason: "timeout"
            })
        })
      )

    const head = (key: string) =>
      Effect.gen(function*() {
        yield* checkKey(key)
        const answer = yield* send("head", key, (abortSignal) =>
          client.send(new HeadObjectCommand({ Bucket: o.bucket, Key: full(key) }), { abortSignal }).catch((e) =>
            statusOf(e) === 404 ? null : Promise.reject(e)
          ))
        if (answer === null) return Option.none()
        const sha256 = answer.Metadata?.[SHA256]
        if (sha256 === undefined || answer.ContentLength === undefined) {
          return yield* new ObjectStoreError({ message: `head ${key}: the object has no ${SHA256} metadata` })
        }
        return Option.some({
          key,
          bytes: answer.ContentLength,
          sha256,
          contentType: answer.ContentType ?? "application/octet-stream"
        })
      }).pipe(Effect.withSpan("ObjectStore.head", { attributes: { key, store: "s3" } }))

    const readRange = (key: string, maxBytes: number) =>
      Effect.gen(function*() {
        yield* checkKey(key)
        if (maxBytes <= 0) {
          return new Uint8Array(0)
        }
        return yield* send("read", key, async (abortSignal) => {
          const answer = await client.send(
            new GetObjectCommand({ Bucket: o.bucket, Key: full(key), Range: `bytes=0-${maxBytes - 1}` }),
            { abortSignal }
          ).catch((e) => (statusOf(e) === 416 ? null : Promise.reject(e))) // an empty object has no byte 0
          if (answer === null || answer.Body === undefined) {
            return new Uint8Array(0)
          }
          return answer.Body.transformToByteArray()
        })
      }).pipe(Effect.withSpan("ObjectStore.readRange", { attributes: { key, store: "s3" } }))

    const remove = (key: string) =>
      Effect.zipRight(
        checkKey(key),
        send(
          "delete",
          key,
          (abortSignal) =>
            client.send(new DeleteObjectCommand({ Bucket: o.bucket, Key: full(key) }), { abortSignal })
        )
      ).pipe(Effect.asVoid, Effect.withSpan("ObjectStore.delete", { attributes: { key, store: "s3" } }))

    const put = <E>(key: string, body: Stream.Stream<Uint8Array, E>, contentType: string) =>
      Effect.gen(function*() {
        yield* checkKey(key)
        const hash = createHash("sha256")
        let bytes = 0
        let pending: Array<Uint8Array> = []
        let pendingBytes = 0
        const staging = `${o.prefix}.incoming/${randomUUID()}`
        let upload: { readonly id: string; readonly parts: Array<{ ETag: string; PartNumber: number }> } | null = null
        let completed = false

        const take = () => {
          const part = concat(pending, pendingBytes)
          pending = []
          pendingBytes = 0
          return part
        }
        const uploadPart = Effect.gen(function*() {
          if (upload === null) {
            const created = yield* send("create upload", key, (abortSignal) =>
              client.send(
                new CreateMultipartUploadCommand({ Bucket: o.bucket, Key: staging, ContentType: contentType }),
                { abortSignal }
              ))
            upload = { id: created.UploadId!, parts: [] }
          }
          const u = upload
          const PartNumber = u.parts.length + 1
          const part = take()
          const answer = yield* send(`upload part ${PartNumber}`, key, (abortSignal) =>
            client.send(
              new UploadPartCommand({
                Bucket: o.bucket,
                Key: staging,
                UploadId: u.id,
                PartNumber,
                Body: part,
                ContentLength: part.length
              }),
              { abortSignal }
            ))
          u.parts.push({ ETag: answer.ETag!, PartNumber })
        })

        const written = Stream.runForEach(body, (chunk) =>
          Effect.suspend(() => {
            hash.update(chunk)
            bytes += chunk.length
            pending.push(chunk)
            pendingBytes += chunk.length
            return pendingBytes >= o.partSize ? uploadPart : Effect.void
          }))

        const finish = Effect.suspend(() => {
          const sha256 = hash.digest("hex")
          const Metadata = { [SHA256]: sha256 }
          const stored = { key, bytes, sha256, contentType }
          if (upload === null) {
            const whole = take()
            return Effect.as(
              send("put", key, (abortSignal) =>
                client.send(
                  new PutObjectCommand({
                    Bucket: o.bucket,
                    Key: full(key),
                    Body: whole,
                    ContentLength: whole.length,
                    ContentType: contentType,
                    Metadata
                  }),
                  { abortSignal }
                )),
              stored
            )
          }
          const u = upload
          return Effect.gen(function*() {
            if (pendingBytes > 0) yield* uploadPart
            yield* send("complete upload", key, (abortSignal) =>
              client.send(
                new CompleteMultipartUploadCommand({
                  Bucket: o.bucket,
                  Key: staging,
                  UploadId: u.id,
                  MultipartUpload: { Parts: u.parts }
                }),
                { abortSignal }
              ))
            completed = true
            yield* send("copy into place", key, (abortSignal) =>
              client.send(
                new CopyObjectCommand({
                  Bucket: o.bucket,
                  Key: full(key),
                  CopySource: encodeURI(`${o.bucket}/${staging}`),
                  MetadataDirective: "REPLACE",
                  ContentType: contentType,
                  Metadata
                }),
                { abortSignal }
              ))
            yield* cleanUp
            return stored
          })
        })

        /** Best effort: what a failed or finished upload leaves under `.incoming/`. */
        const cleanUp = Effect.suspend(() => {
          const u = upload
          if (u === null) return Effect.void
          const request = completed
            ? send(
              "delete staging",
              key,
              (abortSignal) => client.send(new DeleteObjectCommand({ Bucket: o.bucket, Key: staging }), { abortSignal })
            )
            : send(
              "abort upload",
              key,
              (abortSignal) =>
                client.send(new AbortMultipartUploadCommand({ Bucket: o.bucket, Key: staging, UploadId: u.id }), {
                  abortSignal
                })
            )
          return request.pipe(
            Effect.catchAll((e) => Effect.logWarning(`object store: staging left behind: ${e.message}`)),
            Effect.asVoid
          )
        })

        return yield* Effect.zipRight(written, finish).pipe(Effect.onError(() => cleanUp))
      }).pipe(Effect.withSpan("ObjectStore.put", { attributes: { key, store: "s3" } }))

    return ObjectStore.of({ put, head, readRange, delete: remove })
  })

/** The S3 store, watched like every store (ObjectStore.instrument); the client is closed with the layer. */
export const layerS3 = (o: S3Options) =>
  Layer.scoped(ObjectStore, Effect.map(makeS3(o), (s) => instrument("s3", o.timeout, s)))
