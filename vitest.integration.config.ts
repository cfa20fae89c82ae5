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
    maxWorkers: 2
  }
})
