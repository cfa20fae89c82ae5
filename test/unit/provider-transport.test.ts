import { HttpClient } from "@effect/platform"
import { NodeHttpClient } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Fiber, Metric, Schema, TestClock } from "effect"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { providerResponses } from "../../src/observability/metrics.js"
import { seriesBy } from "../../src/observability/series.js"
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

const TIMEOUT = Duration.seconds(15)

/**
 * `use` with the transport the runner's provider clients use (undici's client: Runner.ts, PROVIDER_TIMEOUT 15 s on
 * the TestClock) against the stalling provider, under a provider name of its own, and an effect that waits until the
 * answer's headers have reached the transport (its status counted): only then is the clock moved, so a timeout that
 * still covered only the headers would not fire.
 */
const againstStall = <A, E>(use: (transport: Transport, headersArrived: Effect.Effect<void>) => Effect.Effect<A, E>) =>
  Effect.gen(function*() {
    const server = yield* stallingProvider
    const http = yield* HttpClient.HttpClient
    const provider = `stall-${Math.random().toString(36).slice(2, 8)}`
    const ok = seriesBy(providerResponses, "provider", "status")(provider, "200")
    const headersArrived = Effect.gen(function*() {
      while ((yield* Metric.value(ok)).count === 0) yield* Effect.promise(() => new Promise(setImmediate))
    })
    return yield* use(
      makeTransport({
        provider,
        http,
        baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
        headers: {},
        timeout: TIMEOUT
      }),
      headersArrived
    )
  }).pipe(Effect.scoped, Effect.provide(NodeHttpClient.layerUndici))

/** `call` forked, the headers waited for, the clock moved past PROVIDER_TIMEOUT: the call's failure. */
const failsAfterTimeout = <A, E>(call: Effect.Effect<A, E>, headersArrived: Effect.Effect<void>) =>
  Effect.gen(function*() {
    const fiber = yield* Effect.fork(Effect.flip(call))
    yield* headersArrived
    yield* TestClock.adjust(Duration.sum(TIMEOUT, Duration.seconds(1)))
    return yield* Fiber.join(fiber)
  })

const Job = Schema.Struct({ id: Schema.String })

// each test's guard is its own timeout: without PROVIDER_TIMEOUT over the body, the call waits for undici's 300 s
describe("a provider whose body stalls after its headers", () => {
  it.effect(
    "a query fails as a network failure at PROVIDER_TIMEOUT, not after undici's 300 s",
    () =>
      againstStall((transport, headersArrived) =>
        Effect.gen(function*() {
          const failed = yield* failsAfterTimeout(transport.call("GET", "/v1/tasks/job-1", Job), headersArrived)
          expect(failed.kind).toBe("network")
          expect(failed.detail).toContain("Timeout")
        })
      ),
    scaled(15_000)
  )

  it.effect(
    "a submit whose acceptance (2xx) cannot be read in time is unknown, to be resolved by query",
    () =>
      againstStall((transport, headersArrived) =>
        Effect.gen(function*() {
          const failed = yield* failsAfterTimeout(
            transport.submit("/v1/tasks", { prompt: "x" }, Job, (j) => j.id, "key-1"),
            headersArrived
          )
          expect(failed._tag).toBe("SubmitUnknown")
        })
      ),
    scaled(15_000)
  )

  // its 200 arrived and a cancel reads no body, so it succeeds: what matters is that it returns
  it.effect(
    "a cancel (no body read) returns too",
    () => againstStall((transport) => transport.send("POST", "/v1/tasks/job-1/cancel")),
    scaled(15_000)
  )
})
