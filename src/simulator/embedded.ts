import { FetchHttpClient } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { Config, ConfigProvider, Effect, Layer } from "effect"
import { createServer } from "node:http"
import { providerNames } from "../providers/providers.js"
import { devSecret } from "./devSecrets.js"
import { serveSimulator } from "./Simulator.js"

/** Every provider the simulator serves: all of the platform's list. */
export const SIMULATED_PROVIDERS: ReadonlyArray<string> = providerNames

/** The platform's settings for talking to the simulator at `sim` (and receiving its webhooks at `platform`). */
export const simulatorEnv = (platform: string, sim: string, providers: ReadonlyArray<string>) => ({
  OPENAI_WEBHOOK_SECRET: devSecret("openai"),
  REPLICATE_WEBHOOK_SECRET: devSecret("replicate"),
  CALLBACK_TOKEN_SECRET: "test-callback-secret",
  FAL_USER_ID: "sim-user",
  FAL_JWKS_URL: `${sim}/fal/.well-known/jwks.json`,
  PUBLIC_BASE_URL: platform,
  INBOX_SWEEP_INTERVAL: "200 millis",
  ...Object.fromEntries(providers.map((p) => [`${p.toUpperCase()}_BASE_URL`, `${sim}/${p}`]))
})

/**
 * `npm start` on a bare machine (no provider API keys): the provider simulator runs in the same process on
 * SIMULATOR_PORT (4010) and the runner talks to it, so the live page at `/` can create tasks that really move.
 * Settings from the environment still win over these defaults. EMBEDDED_SIMULATOR=false turns it off.
 */
export const withEmbeddedSimulator = <A, E, R>(runner: Layer.Layer<A, E, R>) =>
  Layer.unwrapEffect(Effect.gen(function*() {
    const anyKey = SIMULATED_PROVIDERS.some((p) => process.env[`${p.toUpperCase()}_API_KEY`] !== undefined)
    const embedded = yield* Config.boolean("EMBEDDED_SIMULATOR").pipe(Config.withDefault(!anyKey))
    if (!embedded) return runner
    const simPort = yield* Config.port("SIMULATOR_PORT").pipe(Config.withDefault(4010))
    const host = yield* Config.string("HTTP_HOST").pipe(Config.withDefault("127.0.0.1"))
    const httpPort = yield* Config.port("HTTP_PORT").pipe(Config.withDefault(3000))
    const platform = `http://${host}:${httpPort}`
    const sim = `http://127.0.0.1:${simPort}`
    const defaults = {
      ...simulatorEnv(platform, sim, SIMULATED_PROVIDERS),
      INBOX_SWEEP_INTERVAL: "1 second",
      // Vertex names a project in every path; the simulator takes any
      VEO_PROJECT: "sim-project",
      ...Object.fromEntries(SIMULATED_PROVIDERS.map((p) => [`${p.toUpperCase()}_LOOKUP`, "true"]))
    }
    const simulator = Layer.scopedDiscard(Effect.gen(function*() {
      const served = yield* serveSimulator({
        openaiSecret: devSecret("openai"),
        replicateSecret: devSecret("replicate"),
        openaiWebhookUrl: `${platform}/webhooks/openai`
      })
      yield* Effect.logInfo(`provider simulator (embedded) on ${served.baseUrl}: providers talk to it`)
    })).pipe(
      Layer.provide(
        Layer.mergeAll(NodeHttpServer.layer(createServer, { host: "127.0.0.1", port: simPort }), FetchHttpClient.layer)
      )
    )
    const config = ConfigProvider.fromEnv().pipe(
      ConfigProvider.orElse(() => ConfigProvider.fromMap(new Map(Object.entries(defaults))))
    )
    return Layer.merge(runner, simulator).pipe(Layer.provide(Layer.setConfigProvider(config)))
  }))
