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
    // Tried and left (stop 60): `isolate: false` took this tier 250 s instead of 382 s. It needs `it` reset before each
    // file (@effect/vitest's `it.layer` writes its methods onto vitest's one `it`: the next file built its layer beside
    // the last one's), and even then vitest 3.2 ended 6 runs of 7 while a worker still ran a last file ("Terminating
    // worker thread", the file unreported, its worker orphaned: "Channel closed"), as in vitest-dev/vitest#8133.
    pool: "forks",
    fileParallelism: true,
    // three at a time on 2 cores: most of a file's time is waiting on services and runners. Two at a time this tier
    // took 6 min 36 s of a 23-minute CI run; three at a time 3 min 57 s, and 4 min 40 s with `stress-ng --cpu 1`
    // beside it, every file passing
    maxWorkers: 3
  }
})
