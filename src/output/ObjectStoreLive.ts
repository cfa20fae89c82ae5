import { Effect, Layer, Option } from "effect"
import { layerFilesystem } from "./FilesystemStore.js"
import { ObjectStoreSettings } from "./objectStoreSettings.js"
import { OutputSettings } from "./outputSettings.js"
import { layerS3 } from "./S3Store.js"

/**
 * The object store the settings name: an S3-compatible bucket (OBJECT_STORE=s3, or auto with S3_BUCKET set), else
 * the filesystem store at OBJECT_STORE_DIR (the embedded default; one runner only, since no other host sees it).
 */
export const layerFromEnv = Layer.unwrapEffect(Effect.gen(function*() {
  const c = yield* ObjectStoreSettings.config
  const { objectStoreDir } = yield* OutputSettings.config
  const bucket = c.kind === "filesystem" ? Option.none() : c.bucket
  if (Option.isNone(bucket)) {
    yield* Effect.logInfo("object store: filesystem").pipe(Effect.annotateLogs({ dir: objectStoreDir }))
    return layerFilesystem(objectStoreDir, c.timeout)
  }
  yield* Effect.logInfo("object store: s3").pipe(Effect.annotateLogs({
    bucket: bucket.value,
    endpoint: Option.getOrElse(c.endpoint, () => `AWS ${c.region}`),
    prefix: c.prefix
  }))
  return layerS3({ ...c, bucket: bucket.value })
}))
