import { NodeHttpServer } from "@effect/platform-node"
import * as FetchHttpClient from "@effect/platform/FetchHttpClient"
import { ConfigProvider, Effect, Layer, Option } from "effect"
import { createServer } from "node:http"
import * as S from "../config/Settings.js"
import { devSecret } from "../providers/devSecrets.js"
import { ProviderSettings } from "../providers/ProviderSettings.js"
import { SIMULATED_PROVIDERS, simulatorEnv } from "../simulator/embedded.js"
import { serveSimulator } from "../simulator/Simulator.js"
import { RunnerSettings } from "./RunnerConfig.js"

/** `npm start`'s provider simulator in the runner's own process. */
export const EmbeddedSimulatorSettings = S.area("embedded simulator", "The provider simulator inside `npm start`", {
  embedded: S.optionalBoolean(
    "EMBEDDED_SIMULATOR",
    "Run the provider simulator in process and point every provider at it; unset: on when no <PROVIDER>_API_KEY is set"
  ),
  port: S.port("SIMULATOR_PORT", "Port of the embedded provider simulator", 4010)
})

/**
 * The simulator's port when the simulator should run: EMBEDDED_SIMULATOR, or unset and no <PROVIDER>_API_KEY set
 * (`npm start` here, `npm run cluster` as a process of its own).
 */
export const simulatorWanted = Effect.gen(function*() {
  const settings = yield* EmbeddedSimulatorSettings.config
  const { clients } = yield* ProviderSettings.config
  const anyKey = Object.values(clients).some((c) => Option.isSome(c.apiKey))
  return Option.getOrElse(settings.embedded, () => !anyKey) ? Option.some(settings.port) : Option.none()
})

/** The platform's settings that point every provider at the simulator `sim` and take its webhooks at `platform`. */
export const simulatorDefaults = (platform: string, sim: string): Record<string, string> => ({
  ...simulatorEnv(platform, sim, SIMULATED_PROVIDERS),
  INBOX_SWEEP_INTERVAL: "1 second",
  // Vertex names a project in every path; the simulator takes any
  VEO_PROJECT: "sim-project",
  ...Object.fromEntries(SIMULATED_PROVIDERS.map((p) => [`${p.toUpperCase()}_LOOKUP`, "true"]))
})

/**
 * `npm start` on a bare machine (no provider API keys): the provider simulator runs in the same process on
 * SIMULATOR_PORT (4010) and the runner talks to it, so the live page at `/` can create tasks that really move.
 * Settings from the environment still win over these defaults. EMBEDDED_SIMULATOR=false turns it off.
 */
export const withEmbeddedSimulator = <A, E, R>(runner: Layer.Layer<A, E, R>) =>
  Layer.unwrapEffect(Effect.gen(function*() {
    const wanted = yield* simulatorWanted
    if (Option.isNone(wanted)) return runner
    const simPort = wanted.value
    const { httpHost: host, httpPort } = yield* RunnerSettings.config
    const platform = `http://${host}:${httpPort}`
    const sim = `http://127.0.0.1:${simPort}`
    const defaults = simulatorDefaults(platform, sim)
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
