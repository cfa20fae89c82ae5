import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import type { AddressInfo } from "node:net"
import { makeServer } from "../../src/http/RawRoutes.js"

/** The Node server every runner serves on, before and after the platform's app is attached. */
describe("raw routes' server", () => {
  it.live("answers 503 Starting until the app is attached, then hands requests to it; raw routes answer throughout", () =>
    Effect.gen(function*() {
      const { routes, server } = makeServer()
      yield* routes.request((p) => p === "/healthz", (_, res) => void res.end("alive"))
      yield* Effect.async<void>((resume) => void server.listen(0, "127.0.0.1", () => resume(Effect.void)))
      const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
      const get = (path: string) =>
        Effect.promise(async () => {
          const r = await fetch(base + path, { signal: AbortSignal.timeout(5_000) })
          return { status: r.status, retryAfter: r.headers.get("retry-after"), body: await r.text() }
        })
      // before: without the answer, Node left this request pending for good
      const early = yield* get("/openapi.json")
      expect(early).toMatchObject({ status: 503, retryAfter: "1" })
      expect(JSON.parse(early.body)).toMatchObject({ _tag: "Starting" })
      expect(yield* get("/healthz")).toMatchObject({ status: 200, body: "alive" })
      server.on("request", (_, res) => res.end("app"))
      expect(yield* get("/openapi.json")).toMatchObject({ status: 200, body: "app" })
      yield* Effect.async<void>((resume) => void server.close(() => resume(Effect.void)))
    }))
})
