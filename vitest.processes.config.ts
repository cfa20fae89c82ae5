import { defineConfig } from "vitest/config"
import { shared } from "./vitest.shared.js"

// Integration tests that start runner processes and measure a whole reconnect or handoff: run alone, after the rest
// of the suite, so that the other files' load (Chromium, floods) cannot starve them.
export default defineConfig({
  test: {
    ...shared({ test: 240_000, hook: 60_000 }),
    include: ["test/integration/processes/**/*.test.ts"],
    pool: "forks",
    fileParallelism: false
  }
})
