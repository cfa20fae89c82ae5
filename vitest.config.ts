import { defineConfig } from "vitest/config"
import { shared } from "./vitest.shared.js"

// `npx vitest run <files>` without -c: both tiers' files (not the process tests), under the integration tier's
// settings. `npm test` runs the tiers one after the other with their own configs.
export default defineConfig({
  test: {
    ...shared({ test: 60_000, hook: 60_000 }),
    include: ["test/unit/**/*.test.ts", "test/integration/**/*.test.ts"],
    exclude: ["test/integration/processes/**", "**/node_modules/**"],
    pool: "forks",
    fileParallelism: true,
    maxWorkers: 2
  }
})
