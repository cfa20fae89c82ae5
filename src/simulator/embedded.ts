import { devCallbackTokenSecret, devSecret } from "../providers/devSecrets.js"
import { providerNames } from "../providers/providers.js"

/** Every provider the simulator serves: all of the platform's list. */
export const SIMULATED_PROVIDERS: ReadonlyArray<string> = providerNames

/** The platform's settings that send `providers`' API calls to the simulator at `sim`. */
export const simulatorBaseUrls = (sim: string, providers: ReadonlyArray<string>): Record<string, string> =>
  Object.fromEntries(providers.map((p) => [`${p.toUpperCase()}_BASE_URL`, `${sim}/${p}`]))

/**
 * The platform's settings that let `providers`' outputs come from the simulator at `sim`: its host:port is each
 * one's only output host, and the one whose loopback address is accepted.
 */
export const simulatorOutputHosts = (sim: string, providers: ReadonlyArray<string>): Record<string, string> => ({
  OUTPUT_PRIVATE_HOSTS: new URL(sim).host,
  ...Object.fromEntries(providers.map((p) => [`${p.toUpperCase()}_OUTPUT_HOSTS`, new URL(sim).host]))
})

/** The platform's settings for talking to the simulator at `sim` (and receiving its webhooks at `platform`). */
export const simulatorEnv = (platform: string, sim: string, providers: ReadonlyArray<string>) => ({
  OPENAI_WEBHOOK_SECRET: devSecret("openai"),
  REPLICATE_WEBHOOK_SECRET: devSecret("replicate"),
  CALLBACK_TOKEN_SECRET: devCallbackTokenSecret,
  FAL_USER_ID: "sim-user",
  FAL_JWKS_URL: `${sim}/fal/.well-known/jwks.json`,
  PUBLIC_BASE_URL: platform,
  INBOX_SWEEP_INTERVAL: "200 millis",
  ...simulatorBaseUrls(sim, providers),
  ...simulatorOutputHosts(sim, providers)
})
