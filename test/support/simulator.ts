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

/** The runner's HTTP API and webhook gateway on `httpPort`. */
export const layerRunnerHttp = (httpPort: number) =>
  Layer.unwrapEffect(Effect.map(runnerConfig({ HTTP_PORT: String(httpPort) }), (c) => layerHttp(c)))
