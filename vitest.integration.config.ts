import { defineConfig } from "vitest/config"
import { shared } from "./vitest.shared.js"

// The integration tier on the real PostgreSQL, Redis, RocketMQ and Chromium (each file skips without its service,
// except in CI). The files that start runner processes run afterwards, alone (vitest.processes.config.ts).
export default defineConfig({
  test: {
    ...shared({ test: 60_000, hook: 60_000 }),
    include: ["test/integration/**/*.test.ts"],
    exclude: ["test/integration/processes/**", "**/node_modules/**"],
    // cluster tests hold advisory locks and runner ports: isolate files in their own processes
    pool: "forks",
    fileParallelism: true,
    // three at a time on 2 cores: most of a file's time is waiting on services and runners. Two at a time this tier
    // took 6 min 36 s of a 23-minute CI run; three at a time 3 min 57 s, and 4 min 40 s with `stress-ng --cpu 1`
    // beside it, every file passing
    maxWorkers: 3
  }
})
