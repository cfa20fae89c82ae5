import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as net from "node:net"
import { noDatabase } from "../../support/database.js"
import { scaled } from "../../support/env.js"
import { runnerOnFreshDatabase, withTimeout } from "../../support/processes.js"

/**
 * SIGTERM while clients still hold connections: the listener's close waits for every connection to end, and Node
 * waits for a request whose headers never finish up to headersTimeout (60 s). The runner closes what is left once its
 * app is down, so the stop is not held by a client.
 */
describe.skipIf(noDatabase)("a runner stopping with connections still open", () => {
  it.live("exits promptly on SIGTERM while a client holds a half-sent request", () =>
    Effect.gen(function*() {
      const { httpPort, runner } = yield* runnerOnFreshDatabase({ LOG_LEVEL: "WARN" })
      // a request line and one header, never the blank line that ends the headers
      const client = yield* Effect.acquireRelease(
        Effect.async<net.Socket>((resume) => {
          const socket = net.connect(httpPort, "127.0.0.1", () => {
            socket.write("GET /openapi.json HTTP/1.1\r\nHost: test\r\n", () => resume(Effect.succeed(socket)))
          })
        }),
        (socket) => Effect.sync(() => socket.destroy())
      )
      const closedByServer = new Promise<void>((resolve) => client.once("close", () => resolve()))
      runner.child.kill("SIGTERM")
      // well below headersTimeout's 60 s (the stop held that long before): the runner let go of the client and exited
      yield* Effect.promise(() => withTimeout(runner.exited, scaled(15_000), "runner exit after SIGTERM"))
      yield* Effect.promise(() => withTimeout(closedByServer, scaled(5_000), "client connection closed"))
      expect(runner.child.exitCode ?? runner.child.signalCode).not.toBeNull()
    }).pipe(Effect.scoped), { timeout: scaled(120_000) })
})
