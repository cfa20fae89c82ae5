import { NodeHttpServer } from "@effect/platform-node"
import { Context, Effect, Layer } from "effect"
import { createServer } from "node:http"
import { layerHttp } from "../../src/runners/Runner.js"
import { devSecret } from "../../src/simulator/devSecrets.js"
import { serveSimulator } from "../../src/simulator/Simulator.js"
import { runnerConfig } from "./runner.js"

/** The provider simulator a test file serves, as a service (fault knobs, counts, jobs). */
export class Sim extends Context.Tag("Sim")<Sim, Effect.Effect.Success<ReturnType<typeof serveSimulator>>>() {}

/** The simulator on `simPort`, signing with the development secrets, OpenAI callbacks to `platform`. */
export const layerSim = (simPort: number, platform: string | null) =>
  Layer.scoped(
    Sim,
    serveSimulator({
      openaiSecret: devSecret("openai"),
      replicateSecret: devSecret("replicate"),
      openaiWebhookUrl: platform === null ? null : `${platform}/webhooks/openai`
    })
  ).pipe(Layer.provide(NodeHttpServer.layer(createServer, { host: "127.0.0.1", port: simPort })))

/** The runner's settings for talking to the simulator (and receiving its webhooks) on these addresses. */
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

/** The runner's HTTP API and webhook gateway on `httpPort`. */
export const layerRunnerHttp = (httpPort: number) =>
  Layer.unwrapEffect(Effect.map(runnerConfig({ HTTP_PORT: String(httpPort) }), (c) => layerHttp(c)))
