import type { ViteUserConfig } from "vitest/config"
import { scaled } from "./test/support/env.js"

/**
 * What every tier shares: the global setup that kills any process a test left behind, and test and hook timeouts
 * scaled by TEST_TIME_FACTOR (test/support/env.ts).
 */
export const shared = (
  timeouts: { readonly test: number; readonly hook: number }
): NonNullable<ViteUserConfig["test"]> => ({
  testTimeout: scaled(timeouts.test),
  hookTimeout: scaled(timeouts.hook),
  globalSetup: ["test/support/globalSetup.ts"]
})
