import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    exclude: ["test/isolated/**", "**/node_modules/**"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // cluster tests hold advisory locks and runner ports: isolate files in their own processes
    globalSetup: ["test/support/globalSetup.ts"],
    pool: "forks",
    fileParallelism: true,
    maxWorkers: 2
  }
})
