import { Context, Duration, Effect, Metric, Option, Schema, Stream } from "effect"
import { objectStoreOperations, objectStoreSeconds } from "../observability/metrics.js"

export interface StoredObject {
  readonly key: string
  readonly bytes: number
  readonly sha256: string
  readonly contentType: string
}

export class ObjectStoreError extends Schema.TaggedError<ObjectStoreError>()("ObjectStoreError", {
  message: Schema.String,
  /** `timeout`: the store did not answer within OBJECT_STORE_TIMEOUT. */
  reason: Schema.optionalWith(Schema.Literal("io", "timeout", "invalid_key"), { default: () => "io" as const })
}) {}

/**
 * Where generated outputs live once we own them. Keys look like `<taskId>/<attemptId>/output.mp4`. Two stores:
 * the filesystem (FilesystemStore.ts, the embedded default) and an S3-compatible bucket (S3Store.ts, shared by every
 * runner); ObjectStoreLive.ts picks one from the settings.
 */
export class ObjectStore extends Context.Tag("ObjectStore")<ObjectStore, {
  /**
   * Writes the whole stream under key. Readers never see a partial object (a failed or interrupted write leaves
   * nothing behind); writing the same key again replaces it. Size and sha256 (hex) are computed while writing.
   */
  readonly put: <E>(
    key: string,
    body: Stream.Stream<Uint8Array, E>,
    contentType: string
  ) => Effect.Effect<StoredObject, ObjectStoreError | E>
  /** The object's description, or none when there is no (complete) object under key. */
  readonly head: (key: string) => Effect.Effect<Option.Option<StoredObject>, ObjectStoreError>
  /** The first `maxBytes` bytes of an object (for probing). */
  readonly readRange: (key: string, maxBytes: number) => Effect.Effect<Uint8Array, ObjectStoreError>
  /** Removes the object; removing a missing one succeeds. */
  readonly delete: (key: string) => Effect.Effect<void, ObjectStoreError>
}>() {}

export type ObjectStoreService = Context.Tag.Service<ObjectStore>

/** Keys are relative paths of plain segments in every store, so one key means the same object in each. */
export const checkKey = (key: string): Effect.Effect<ReadonlyArray<string>, ObjectStoreError> => {
  const segments = key.split("/")
  const bad = key.length === 0 || key.includes("\\") || key.includes("\0") || key.startsWith("/") ||
    segments.some((s) => s === "" || s === "." || s === "..") || key.endsWith(".meta.json")
  return bad
    ? Effect.fail(new ObjectStoreError({ message: `invalid object key ${JSON.stringify(key)}`, reason: "invalid_key" }))
    : Effect.succeed(segments)
}

type Outcome = "ok" | "missing" | "timeout" | "error" | "body_failed"

const outcomeOf = (e: unknown): Outcome =>
  e instanceof ObjectStoreError ? (e.reason === "timeout" ? "timeout" : "error") : "body_failed"

/**
 * Every store's operations with the same watch on them: a timeout on each single-request operation (head, read,
 * delete; a put lasts as long as its body, and each request of an S3 upload has its own), a count by outcome and a
 * latency per op, and a log line when one fails (with the object key; the trace id comes from the caller's span).
 */
export const instrument = (store: "filesystem" | "s3", timeout: Duration.Duration, s: ObjectStoreService) => {
  const watch = <A, E>(op: string, key: string, effect: Effect.Effect<A, E>, ok: (a: A) => Outcome = () => "ok") =>
    Effect.suspend(() => {
      const started = performance.now()
      const record = (outcome: Outcome) =>
        Effect.zipRight(
          Metric.update(
            objectStoreOperations.pipe(
              Metric.tagged("store", store),
              Metric.tagged("op", op),
              Metric.tagged("outcome", outcome)
            ),
            1
          ),
          Metric.update(
            objectStoreSeconds.pipe(Metric.tagged("store", store), Metric.tagged("op", op)),
            (performance.now() - started) / 1000
          )
        )
      return effect.pipe(
        Effect.tap((a) => record(ok(a))),
        Effect.tapError((e) =>
          Effect.zipRight(
            record(outcomeOf(e)),
            Effect.logWarning(`object store ${op} failed: ${e instanceof ObjectStoreError ? e.message : "body failed"}`)
          )
        ),
        Effect.annotateLogs({ object_key: key, object_store: store })
      )
    })
  const timed = <A>(op: string, key: string, effect: Effect.Effect<A, ObjectStoreError>) =>
    Effect.timeoutFail(effect, {
      duration: timeout,
      onTimeout: () =>
        new ObjectStoreError({
          message: `${op} ${key}: no answer within ${Duration.format(timeout)}`,
          reason: "timeout"
        })
    })
  return ObjectStore.of({
    put: (key, body, contentType) => watch("put", key, s.put(key, body, contentType)),
    head: (key) => watch("head", key, timed("head", key, s.head(key)), (o) => Option.isSome(o) ? "ok" : "missing"),
    readRange: (key, maxBytes) => watch("read", key, timed("read", key, s.readRange(key, maxBytes))),
    delete: (key) => watch("delete", key, timed("delete", key, s.delete(key)))
  })
}
