import { NodeHttpServer, NodeRuntime } from "@effect/platform-node"
import * as FetchHttpClient from "@effect/platform/FetchHttpClient"
import { Effect, Layer } from "effect"
import { createServer } from "node:http"
import { serveSimulator } from "./Simulator.js"
import { SimulatorSettings } from "./SimulatorSettings.js"

/**
 * npm run simulator: the provider simulator as its own server. Point the platform's <PROVIDER>_BASE_URL at
 * http://127.0.0.1:<SIM_PORT>/<provider>, FAL_JWKS_URL at .../fal/.well-known/jwks.json, give both sides
 * the same webhook secrets, and let the outputs it serves in (<PROVIDER>_OUTPUT_HOSTS and OUTPUT_PRIVATE_HOSTS
 * = 127.0.0.1:<SIM_PORT>). Faults: POST /_sim/faults; submissions per idempotency key: GET /_sim/counts; webhooks
 * the platform answered 2xx: GET /_sim/acked.
 */
const program = Effect.gen(function*() {
  const { openaiSecret, openaiWebhookUrl, port, replicateSecret } = yield* SimulatorSettings.config
  return yield* Effect.gen(function*() {
    const sim = yield* serveSimulator({ openaiSecret, replicateSecret, openaiWebhookUrl })
    yield* Effect.logInfo(`provider simulator listening on ${sim.baseUrl}`)
    return yield* Effect.never
  }).pipe(
    Effect.scoped,
    Effect.provide(
      Layer.mergeAll(NodeHttpServer.layer(createServer, { host: "127.0.0.1", port }), FetchHttpClient.layer)
    )
  )
})

program.pipe(NodeRuntime.runMain)
