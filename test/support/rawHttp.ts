import { Effect } from "effect"
import * as http from "node:http"
import * as net from "node:net"

/** What a raw client saw: the status line's code (if any answer came), and when the server closed the socket. */
export interface RawOutcome {
  readonly status: number | null
  /** Milliseconds from the request's head being sent to the answer's status line. */
  readonly answeredAfterMs: number | null
  /** Milliseconds from the request's head being sent to the server closing the connection. */
  readonly closedAfterMs: number
  /** The socket ended in a reset (ECONNRESET) rather than a clean close. */
  readonly reset: boolean
}

/**
 * A request written byte by byte on a plain TCP socket, as a slow or hostile client would: `head` (the request line
 * and headers), then the body `parts`, one every `everyMs` (the client's pace, not a wait in the test), and nothing
 * more. Resolves when the server closes the connection.
 */
export const rawRequest = (options: {
  readonly port: number
  readonly head: string
  readonly parts: ReadonlyArray<string>
  readonly everyMs?: number
}) =>
  Effect.async<RawOutcome>((resume) => {
    const socket = net.connect(options.port, "127.0.0.1")
    const started = Date.now()
    let received = ""
    let answeredAfterMs: number | null = null
    let reset = false
    let timer: NodeJS.Timeout | undefined
    socket.setNoDelay(true)
    socket.on("connect", () => {
      socket.write(options.head)
      const parts = [...options.parts]
      const next = () => {
        const part = parts.shift()
        if (part === undefined || socket.destroyed) return
        socket.write(part)
        timer = setTimeout(next, options.everyMs ?? 0)
      }
      next()
    })
    socket.on("data", (chunk) => {
      received += chunk.toString("latin1")
      if (answeredAfterMs === null && /^HTTP\/1\.1 \d{3}/.test(received)) answeredAfterMs = Date.now() - started
    })
    socket.on("error", (e: NodeJS.ErrnoException) => {
      if (e.code === "ECONNRESET" || e.code === "EPIPE") reset = true
    })
    socket.on("close", () => {
      clearTimeout(timer)
      const status = /^HTTP\/1\.1 (\d{3})/.exec(received)?.[1]
      resume(Effect.succeed({
        status: status === undefined ? null : Number(status),
        answeredAfterMs,
        closedAfterMs: Date.now() - started,
        reset
      }))
    })
    return Effect.sync(() => {
      clearTimeout(timer)
      socket.destroy()
    })
  })

/**
 * A POST with a chunked body that keeps coming (`chunk` after `chunk`, up to `total` bytes) until the server
 * answers: Node's own HTTP client, as a provider's would be. Resolves with the answer's status, or the error that
 * ended the exchange before any answer (a reset).
 */
export const chunkedPost = (options: {
  readonly port: number
  readonly path: string
  readonly chunk: string
  readonly total: number
  readonly headers?: Record<string, string>
}) =>
  Effect.async<{ readonly status: number | null; readonly error: string | null }>((resume) => {
    let done = false
    const finish = (status: number | null, error: string | null) => {
      if (done) return
      done = true
      resume(Effect.succeed({ status, error }))
    }
    const req = http.request({
      host: "127.0.0.1",
      port: options.port,
      method: "POST",
      path: options.path,
      agent: false,
      headers: { "content-type": "application/json", ...options.headers }
    })
    req.on("response", (res) => {
      res.resume()
      finish(res.statusCode ?? null, null)
    })
    req.on("error", (e: NodeJS.ErrnoException) => finish(null, e.code ?? e.message))
    let sent = 0
    const write = () => {
      while (sent < options.total && !done && !req.destroyed) {
        sent += options.chunk.length
        if (!req.write(options.chunk)) return void req.once("drain", write)
      }
      if (!done && !req.destroyed) req.end()
    }
    write()
    return Effect.sync(() => req.destroy())
  })
