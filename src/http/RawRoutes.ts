import { Context, Effect } from "effect"
import { createServer, IncomingMessage, type Server, ServerResponse } from "node:http"
import { Socket } from "node:net"
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
  /** A check before every route, raw or not (the system mode's gates): a Refusal is the answer, nothing else runs. */
  readonly gate: (check: Gate) => Effect.Effect<void>
}>() {}

/** An answer given instead of the route: a status, a JSON body and how long to wait before trying again. */
export interface Refusal {
  readonly status: number
  readonly body: Record<string, unknown>
  readonly retryAfterSeconds: number
}
export type Gate = (path: string) => Refusal | undefined

const refuseRequest = (res: ServerResponse, r: Refusal) =>
  res.writeHead(r.status, {
    "content-type": "application/json",
    "cache-control": "no-store",
    "retry-after": String(r.retryAfterSeconds)
  }).end(JSON.stringify(r.body))

const refuseSocket = (socket: Duplex, r: Refusal) => {
  const body = JSON.stringify(r.body)
  socket.end(
    `HTTP/1.1 ${r.status} Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: ${r.retryAfterSeconds}\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`
  )
}

/**
 * A request that came before the platform's app was attached: the server listens as soon as its layer is built, and
 * the API is built after it, so a prober or a load balancer can reach the port first. Node leaves a request without
 * a listener unanswered for good (seen: benches polling /openapi.json at start hung); it gets this instead.
 */
const starting: Refusal = {
  status: 503,
  body: { _tag: "Starting", message: "the runner is starting: try again shortly" },
  retryAfterSeconds: 1
}

const pathOf = (request: IncomingMessage) => {
  const url = request.url ?? "/"
  const q = url.indexOf("?")
  return q === -1 ? url : url.slice(0, q)
}

/**
 * V8 lays out a constructor's objects from its first few instances ("slack tracking", 7 constructions) and fixes the
 * layout then. When the server's first responses were SSE streams with a full GC among them (bench:sse's memory probe
 * runs one before the streams open), every ServerResponse built afterwards came out in dictionary mode: 3.1 KiB of
 * property dictionary per response for the life of the process (a heap snapshot, 5,000 streams: 15 MiB of the 50).
 * Not seen when the first responses are the platform's, nor in a bare node:http server; the trigger beyond that was
 * not found. So the layouts are fixed here, from throwaway messages on an unconnected socket, before any request:
 * measured (bench:sse, split gateway, 5,000 idle streams) live heap 10.1 → 7.3 KiB per stream. No test: one that
 * probed V8 (%HasFastProperties) in a gateway process after a full GC and 12 streams passed with and without this.
 */
const settleMessageShapes = () => {
  for (let i = 0; i < 8; i++) new ServerResponse(new IncomingMessage(new Socket()))
}

/** A Node HTTP server whose requests and upgrades go to a registered raw route first, else to the platform. */
export const makeServer = (): { readonly server: Server; readonly routes: RawRoutes["Type"] } => {
  const server = createServer()
  settleMessageShapes()
  const requests: Array<Route<RequestHandler>> = []
  const upgrades: Array<Route<UpgradeHandler>> = []
  const gates: Array<Gate> = []
  const refusalOf = (path: string) => {
    for (const gate of gates) {
      const refusal = gate(path)
      if (refusal !== undefined) return refusal
    }
    return undefined
  }
  const emit = server.emit.bind(server) as (event: string, ...args: Array<any>) => boolean
  server.emit = ((event: string, ...args: Array<any>) => {
    if (event === "request") {
      const path = pathOf(args[0])
      const refusal = refusalOf(path)
      if (refusal !== undefined) {
        // the body is not read: the connection closes after the answer
        args[1].shouldKeepAlive = false
        refuseRequest(args[1], refusal)
        return true
      }
      const route = requests.find((r) => r.matches(path))
      if (route !== undefined) {
        route.handle(args[0], args[1])
        return true
      }
      if (server.listenerCount("request") === 0) {
        args[1].shouldKeepAlive = false
        refuseRequest(args[1], starting)
        return true
      }
    } else if (event === "upgrade") {
      const path = pathOf(args[0])
      const refusal = refusalOf(path)
      if (refusal !== undefined) {
        refuseSocket(args[1], refusal)
        return true
      }
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
  return {
    server,
    routes: {
      request: register(requests),
      upgrade: register(upgrades),
      gate: (check: Gate) => Effect.sync(() => void gates.push(check))
    }
  }
}
