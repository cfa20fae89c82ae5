import { defineConfig } from "vitest/config"
import { shared } from "./vitest.shared.js"

// Integration tests that start runner processes and measure a whole reconnect or handoff: run after the rest of the
// suite, so that its load (Chromium, floods) cannot starve them; two files at a time (each file's runners beside
// another's, as they must hold beside a CPU hog anyway). One at a time this tier took 8 min 15 s of CI's 23; two at a
// time it took 4 min 16 s, and 4 min 2 s with `stress-ng --cpu 1` beside it, every file passing.
export default defineConfig({
  test: {
    ...shared({ test: 240_000, hook: 60_000 }),
    include: ["test/integration/processes/**/*.test.ts"],
    pool: "forks",
    fileParallelism: true,
    maxWorkers: 2
  }
})
