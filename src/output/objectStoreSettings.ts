import { Config, ConfigError, Duration, Either, Option } from "effect"
import * as S from "../config/Settings.js"

const area = S.area("Object store", "where outputs live once we own them: a folder, or an S3-compatible bucket", {
  kind: S.literal(
    "OBJECT_STORE",
    "filesystem: OBJECT_STORE_DIR on this runner's disk (one runner only: another host cannot read it); s3: the " +
      "S3_BUCKET (shared by every runner); auto: s3 when S3_BUCKET is set, else filesystem",
    ["auto", "filesystem", "s3"],
    "auto"
  ),
  timeout: S.refine(
    S.duration(
      "OBJECT_STORE_TIMEOUT",
      "how long one object store request may take (a head, a read, a delete, one part of an upload); a silent " +
        "store fails the operation after it, and the output is retried like any failed fetch",
      "30 seconds"
    ),
    "must be longer than 0",
    (d) => Duration.greaterThan(d, Duration.zero)
  ),
  bucket: S.optionalString("S3_BUCKET", "the bucket outputs are written to (OBJECT_STORE=s3 needs it)"),
  prefix: S.string("S3_PREFIX", "prefix of every key written to the bucket (e.g. outputs/)", ""),
  endpoint: S.optionalString(
    "S3_ENDPOINT",
    "the S3 API's base URL for an S3-compatible store (MinIO, R2, Ceph, s3rver); unset: AWS's own for S3_REGION"
  ),
  region: S.string("S3_REGION", "the bucket's region (what request signatures are made for)", "us-east-1"),
  accessKeyId: S.secret(
    "S3_ACCESS_KEY_ID",
    "with S3_SECRET_ACCESS_KEY: static credentials; both unset: the AWS SDK's default chain (environment, profile, " +
      "instance or task role)"
  ),
  secretAccessKey: S.secret("S3_SECRET_ACCESS_KEY", "the secret of S3_ACCESS_KEY_ID"),
  forcePathStyle: S.boolean(
    "S3_FORCE_PATH_STYLE",
    "address the bucket as <endpoint>/<bucket> rather than <bucket>.<endpoint> (MinIO, s3rver and most " +
      "self-hosted stores need it)",
    false
  ),
  partSize: S.integer(
    "S3_PART_SIZE",
    "bytes per part of a multipart upload: an output larger than this is uploaded in parts of it, so one upload " +
      "holds at most about this much in memory (S3's minimum part is 5 MiB)",
    8 * 1024 * 1024,
    { min: 5 * 1024 * 1024 }
  )
})

const invalid = (name: string, message: string) => ConfigError.InvalidData([name], `${name}: ${message}`)

/**
 * The object store's settings, the combinations checked too (so `validateAll` at start names the variable):
 * OBJECT_STORE=s3 needs S3_BUCKET, and static credentials come as a pair.
 */
export const ObjectStoreSettings: typeof area = {
  ...area,
  config: Config.mapOrFail(area.config, (c) => {
    if (c.kind === "s3" && Option.isNone(c.bucket)) {
      return Either.left(invalid("S3_BUCKET", "OBJECT_STORE=s3 needs the bucket"))
    }
    if (Option.isSome(c.accessKeyId) !== Option.isSome(c.secretAccessKey)) {
      return Either.left(
        invalid("S3_ACCESS_KEY_ID", "S3_ACCESS_KEY_ID and S3_SECRET_ACCESS_KEY are set together or not at all")
      )
    }
    if (Option.isSome(c.endpoint) && !URL.canParse(c.endpoint.value)) {
      return Either.left(invalid("S3_ENDPOINT", `not a URL: ${JSON.stringify(c.endpoint.value)}`))
    }
    return Either.right(c)
  })
}

export type ObjectStoreConfig = S.AreaOf<typeof area>
