import { NodeHttpServer } from "@effect/platform-node"
import * as FetchHttpClient from "@effect/platform/FetchHttpClient"
import { Context, type Effect, Layer } from "effect"
import { createServer } from "node:http"
import { devSecret } from "../providers/devSecrets.js"
import { ProviderClients } from "../providers/ProviderClients.js"
import { SIMULATED_PROVIDERS, simulatorBaseUrls, simulatorEnv } from "../simulator/embedded.js"
import { serveSimulator } from "../simulator/Simulator.js"
import { withSettings } from "./TestRunner.js"

/** The provider simulator a test serves, as a service: its fault knobs, job counts and jobs. */
export class Sim extends Context.Tag("Sim")<Sim, Effect.Effect.Success<ReturnType<typeof serveSimulator>>>() {}

/**
 * The provider simulator (OpenAI, Replicate, fal, Runway, Luma, Veo) on `port`, signing its webhooks with the
 * development secrets and sending OpenAI's to `platformUrl` (the runner's HTTP server; null: no webhooks).
 */
export const layerTestSimulator = (port: number, platformUrl: string | null) =>
  Layer.scoped(
    Sim,
    serveSimulator({
      openaiSecret: devSecret("openai"),
      replicateSecret: devSecret("replicate"),
      openaiWebhookUrl: platformUrl === null ? null : `${platformUrl}/webhooks/openai`
    })
  ).pipe(Layer.provide(NodeHttpServer.layer(createServer, { host: "127.0.0.1", port })))

/**
 * The runner's settings that point `providers` (all simulated ones by default) at the simulator on `simPort` and
 * let its webhooks in: pass them as `layerTestRunner({ settings })`.
 */
export const simulatorSettings = (
  simPort: number,
  platformUrl: string,
  providers: ReadonlyArray<string> = SIMULATED_PROVIDERS
): Record<string, string> => simulatorEnv(platformUrl, `http://127.0.0.1:${simPort}`, providers)

/**
 * The simulator on `port` (sending no webhooks to a runner) and the platform's `ProviderClients` pointed at it, with
 * no runner: for testing the clients and the simulator against each other. `settings` go over the clients' own
 * (`{ PROVIDER_TIMEOUT: "2 seconds" }`).
 */
export const layerTestProviderClients = (port: number, settings: Readonly<Record<string, string>> = {}) =>
  Layer.merge(layerTestSimulator(port, null), ProviderClients.Default).pipe(
    Layer.provide(FetchHttpClient.layer),
    Layer.provide(withSettings({
      ...simulatorBaseUrls(`http://127.0.0.1:${port}`, SIMULATED_PROVIDERS),
      VEO_PROJECT: "sim-project",
      ...settings
    }))
  )
