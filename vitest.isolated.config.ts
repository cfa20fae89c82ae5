import { defineConfig } from "vitest/config"

// Tests that start several runner processes and measure a whole reconnect: run alone, after the main suite, so
// that the other files' load (Chromium, floods) cannot starve them.
export default defineConfig({
  test: {
    include: ["test/isolated/**/*.test.ts"],
    testTimeout: 240_000,
    hookTimeout: 60_000,
    globalSetup: ["test/support/globalSetup.ts"],
    pool: "forks",
    fileParallelism: false
  }
})
