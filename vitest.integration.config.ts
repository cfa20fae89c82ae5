import { defineConfig } from "vitest/config"
import { shared } from "./vitest.shared.js"

// The integration tier on the real PostgreSQL, Redis, RocketMQ and Chromium (each file skips without its service,
// except in CI). The files that start runner processes run afterwards, alone (vitest.processes.config.ts).
export default defineConfig({
  test: {
    ...shared({ test: 60_000, hook: 60_000 }),
    include: ["test/integration/**/*.test.ts"],
    exclude: ["test/integration/processes/**", "**/node_modules/**"],
    // cluster tests hold advisory locks and runner ports: isolate files in their own processes.
    // Tried and left (stop 60): files sharing their worker (`isolate: false`) took this tier 250 s against 382 s here
    // (collecting 31 s against 218 s, summed), every file passing once. But @effect/vitest's `it.layer` assigns its
    // layer-bound methods onto vitest's one `it` object, so the next file's `it.layer` was the last file's nested one
    // (its layer built beside the last file's: a second, unmigrated test database); resetting `it` in a setup file
    // mended that, yet in 6 runs of 7 vitest ended the run while a worker still ran one of the last files
    // (revocation-refresh, pg-int8 or sweeper-order), with "Unhandled Rejection: Terminating worker thread" and that
    // file unreported (exit 1). The orphaned worker then logged "Channel closed" (ERR_IPC_CHANNEL_CLOSED) from vitest's
    // own task update and kept its file's fibers busy for minutes: vitest 3.2's pool tore the worker down early (as in
    // vitest-dev/vitest#8133, 3.2 with isolate: false). Until a vitest that does not, each file keeps its own process.
    pool: "forks",
    fileParallelism: true,
    // three at a time on 2 cores: most of a file's time is waiting on services and runners. Two at a time this tier
    // took 6 min 36 s of a 23-minute CI run; three at a time 3 min 57 s, and 4 min 40 s with `stress-ng --cpu 1`
    // beside it, every file passing
    maxWorkers: 3
  }
})
