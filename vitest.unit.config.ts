import { defineConfig } from "vitest/config"
import { shared } from "./vitest.shared.js"

// The unit tier: pure and in-memory (PGlite where a database is needed), time on the TestClock, no service needed.
export default defineConfig({
  test: {
    // hooks build the PGlite runner layer: tens of seconds on a loaded machine
    ...shared({ test: 30_000, hook: 60_000 }),
    include: ["test/unit/**/*.test.ts"],
    pool: "forks",
    fileParallelism: true,
    maxWorkers: 2
  }
})
