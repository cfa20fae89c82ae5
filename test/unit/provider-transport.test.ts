import { HttpClient } from "@effect/platform"
import { NodeHttpClient } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Schema } from "effect"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { makeTransport, type Transport } from "../../src/providers/transport.js"
import { scaled } from "../support/env.js"

/**
 * A provider that answers 200 with its headers and the start of a JSON body, then goes silent with the connection
 * open: what a stalled proxy or a provider's overloaded backend does. Closed with the test.
 */
const stallingProvider = Effect.acquireRelease(
  Effect.async<Server>((resume) => {
    const server = createServer((_req, res) => {
      res.writeHead(200, { "content-type": "application/json" })
      res.write("{\"id\":\"job-1\",")
    })
    server.listen(0, "127.0.0.1", () => resume(Effect.succeed(server)))
  }),
  (server) =>
    Effect.async<void>((resume) => {
      server.closeAllConnections()
      server.close(() => resume(Effect.void))
    })
)

/**
 * `use` with the transport the runner's provider clients use (undici's client: Runner.ts, PROVIDER_TIMEOUT 300 ms)
 * against the stalling provider.
 */
const againstStall = <A, E>(use: (transport: Transport) => Effect.Effect<A, E>) =>
  Effect.gen(function*() {
    const server = yield* stallingProvider
    const http = yield* HttpClient.HttpClient
    return yield* use(makeTransport({
      provider: "test",
      http,
      baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      headers: {},
      timeout: Duration.millis(300)
    }))
  }).pipe(Effect.scoped, Effect.provide(NodeHttpClient.layerUndici))

const Job = Schema.Struct({ id: Schema.String })

// each test's guard is its own timeout: without PROVIDER_TIMEOUT over the body, undici waits 300 s for it
describe("a provider whose body stalls after its headers", () => {
  it.live(
    "a query fails as a network failure within PROVIDER_TIMEOUT, not after undici's 300 s",
    () =>
      againstStall((transport) =>
        Effect.gen(function*() {
          const failed = yield* Effect.flip(transport.call("GET", "/v1/tasks/job-1", Job))
          expect(failed.kind).toBe("network")
          expect(failed.detail).toContain("Timeout")
        })
      ),
    scaled(15_000)
  )

  it.live(
    "a submit whose acceptance (2xx) cannot be read in time is unknown, to be resolved by query",
    () =>
      againstStall((transport) =>
        Effect.gen(function*() {
          const failed = yield* Effect.flip(transport.submit("/v1/tasks", { prompt: "x" }, Job, (j) => j.id, "key-1"))
          expect(failed._tag).toBe("SubmitUnknown")
        })
      ),
    scaled(15_000)
  )

  // its 200 arrived and a cancel reads no body, so it succeeds: what matters is that it returns
  it.live(
    "a cancel (no body read) returns too",
    () => againstStall((transport) => transport.send("POST", "/v1/tasks/job-1/cancel")),
    scaled(15_000)
  )
})
