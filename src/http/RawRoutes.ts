import { Context, Effect } from "effect"
import type { IncomingMessage, ServerResponse } from "node:http"
import { createServer, type Server } from "node:http"
import type { Duplex } from "node:stream"

export type RequestHandler = (request: IncomingMessage, response: ServerResponse) => void
export type UpgradeHandler = (request: IncomingMessage, socket: Duplex, head: Buffer) => void

interface Route<H> {
  readonly matches: (path: string) => boolean
  readonly handle: H
}

/**
 * Long-lived streams served on the Node server directly, beside the Effect HTTP app. An open response in the
 * platform's pipeline holds a fiber, a span and a stream pipe: measured here at 28–64 KiB per idle SSE client,
 * against ~5 KiB of heap for a bare Node response. And the platform's WebSocket server has no frame size
 * limit, ping or send buffer to watch. So the event streams take their paths before the app sees them, and
 * run Effect only where there is work (authenticating, replaying).
 */
export class RawRoutes extends Context.Tag("RawRoutes")<RawRoutes, {
  readonly request: (matches: (path: string) => boolean, handle: RequestHandler) => Effect.Effect<void>
  readonly upgrade: (matches: (path: string) => boolean, handle: UpgradeHandler) => Effect.Effect<void>
}>() {}

const pathOf = (request: IncomingMessage) => {
  const url = request.url ?? "/"
  const q = url.indexOf("?")
  return q === -1 ? url : url.slice(0, q)
}

/** A Node HTTP server whose requests and upgrades go to a registered raw route first, else to the platform. */
export const makeServer = (): { readonly server: Server; readonly routes: RawRoutes["Type"] } => {
  const server = createServer()
  const requests: Array<Route<RequestHandler>> = []
  const upgrades: Array<Route<UpgradeHandler>> = []
  const emit = server.emit.bind(server) as (event: string, ...args: Array<any>) => boolean
  server.emit = ((event: string, ...args: Array<any>) => {
    if (event === "request") {
      const path = pathOf(args[0])
      const route = requests.find((r) => r.matches(path))
      if (route !== undefined) {
        route.handle(args[0], args[1])
        return true
      }
    } else if (event === "upgrade") {
      const path = pathOf(args[0])
      const route = upgrades.find((r) => r.matches(path))
      if (route !== undefined) {
        route.handle(args[0], args[1], args[2])
        return true
      }
    }
    return emit(event, ...args)
  }) as typeof server.emit
  const register = <H>(list: Array<Route<H>>) => (matches: (path: string) => boolean, handle: H) =>
    Effect.sync(() => void list.push({ matches, handle }))
  return { server, routes: { request: register(requests), upgrade: register(upgrades) } }
}
