import * as S from "../config/Settings.js"
import { hostPatternList } from "./hostPatterns.js"

/** The output pipeline: where outputs are stored, what is accepted, how many are fetched at once. */
export const OutputSettings = S.area("Output", "copying finished outputs from the providers into our store", {
  objectStoreDir: S.string("OBJECT_STORE_DIR", "folder of the filesystem object store", ".data/objects"),
  concurrency: S.integer(
    "OUTPUT_CONCURRENCY",
    "output downloads and checks at once on a runner, the one whose URL expires first going first",
    8,
    { min: 1 }
  ),
  maxBytes: S.integer("OUTPUT_MAX_BYTES", "largest output accepted (2 GiB)", 2 * 1024 ** 3, { min: 1 }),
  contentTypes: S.map(
    S.string(
      "OUTPUT_CONTENT_TYPES",
      "comma-separated media types accepted as outputs",
      "video/mp4,application/octet-stream"
    ),
    (s): ReadonlySet<string> => new Set(s.split(",").map((t) => t.trim().toLowerCase()).filter((t) => t.length > 0))
  ),
  downloadTimeout: S.duration("OUTPUT_DOWNLOAD_TIMEOUT", "how long one output download may take", "10 minutes"),
  fetchLease: S.duration(
    "OUTPUT_FETCH_LEASE",
    "an output download's lease, renewed while it runs: another runner (a new owner after a shard move) waits for " +
      "it rather than downloading too; a runner that died releases it this long after its last renewal",
    "30 seconds"
  ),
  privateHosts: hostPatternList(
    "OUTPUT_PRIVATE_HOSTS",
    "for the provider simulator only: exact host:port entries whose loopback or private addresses outputs may come " +
      "from (still only where the provider's <PROVIDER>_OUTPUT_HOSTS allows them; link-local, metadata and " +
      "unspecified addresses never). Empty in production",
    [],
    { subdomains: false }
  )
})
