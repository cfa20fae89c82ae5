import { FetchHttpClient } from "@effect/platform"
import { NodeHttpServer, NodeRuntime } from "@effect/platform-node"
import { Config, Effect, Layer } from "effect"
import { createServer } from "node:http"
import { devSecret } from "./devSecrets.js"
import { serveSimulator } from "./Simulator.js"

/**
 * npm run simulator: the provider simulator as its own server. Point the platform's <PROVIDER>_BASE_URL at
 * http://127.0.0.1:<SIM_PORT>/<provider>, FAL_JWKS_URL at .../fal/.well-known/jwks.json, and give both sides
 * the same webhook secrets. Faults: POST /_sim/faults; submissions per idempotency key: GET /_sim/counts.
 */
const program = Effect.gen(function*() {
  const sim = yield* serveSimulator({
    openaiSecret: yield* Config.string("SIM_OPENAI_WEBHOOK_SECRET").pipe(Config.withDefault(devSecret("openai"))),
    replicateSecret: yield* Config.string("SIM_REPLICATE_WEBHOOK_SECRET").pipe(
      Config.withDefault(devSecret("replicate"))
    ),
    openaiWebhookUrl: yield* Config.string("SIM_OPENAI_WEBHOOK_URL").pipe(
      Config.withDefault("http://127.0.0.1:3000/webhooks/openai")
    )
  })
  yield* Effect.logInfo(`provider simulator listening on ${sim.baseUrl}`)
  return yield* Effect.never
})

const port = Number(process.env.SIM_PORT ?? 4010)
program.pipe(
  Effect.scoped,
  Effect.provide(
    Layer.mergeAll(NodeHttpServer.layer(createServer, { host: "127.0.0.1", port }), FetchHttpClient.layer)
  ),
  NodeRuntime.runMain
)
