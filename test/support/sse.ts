import { Effect } from "effect"
import * as http from "node:http"

export interface SseEvent {
  readonly id: string | undefined
  readonly event: string
  readonly data: string
  readonly at: number
}

/** A Server-Sent Events client for tests (Node 20 has no EventSource): every frame and comment it got. */
export interface SseClient {
  readonly status: number
  readonly headers: http.IncomingHttpHeaders
  readonly body: () => string
  readonly events: Array<SseEvent>
  readonly comments: Array<string>
  readonly retry: () => number | undefined
  readonly ended: () => boolean
  /**
   * Resumes once `check` holds, trying it now and again as each chunk of the stream arrives (no polling, no clock);
   * dies if the stream ends while it does not hold.
   */
  readonly waitFor: (what: string, check: () => boolean) => Effect.Effect<void>
  readonly close: () => void
}

export const openSse = (url: string, headers: Record<string, string> = {}) =>
  Effect.async<SseClient>((resume) => {
    const events: Array<SseEvent> = []
    const comments: Array<string> = []
    let retry: number | undefined
    let ended = false
    let raw = ""
    // the waiters of waitFor: each is tried on every chunk and when the stream ends
    const waiters = new Set<() => void>()
    const wake = () => waiters.forEach((w) => w())
    const req = http.get(url, { headers: { accept: "text/event-stream", ...headers } }, (res) => {
      let buffer = ""
      res.setEncoding("utf8")
      res.on("data", (chunk: string) => {
        raw += chunk
        if (res.statusCode !== 200) return
        buffer += chunk
        let end: number
        while ((end = buffer.indexOf("\n\n")) !== -1) {
          const block = buffer.slice(0, end)
          buffer = buffer.slice(end + 2)
          let id: string | undefined
          let event = "message"
          const data: Array<string> = []
          for (const line of block.split("\n")) {
            if (line.startsWith(":")) comments.push(line.slice(1).trim())
            else if (line.startsWith("id: ")) id = line.slice(4)
            else if (line.startsWith("event: ")) event = line.slice(7)
            else if (line.startsWith("data: ")) data.push(line.slice(6))
            else if (line.startsWith("retry: ")) retry = Number(line.slice(7))
          }
          if (data.length > 0) events.push({ id, event, data: data.join("\n"), at: Date.now() })
        }
        wake()
      })
      const done = () => {
        ended = true
        wake()
      }
      res.on("end", done).on("close", done).on("error", done)
      resume(Effect.succeed({
        status: res.statusCode ?? 0,
        headers: res.headers,
        body: () => raw,
        events,
        comments,
        retry: () => retry,
        ended: () => ended,
        waitFor: (what, check) =>
          Effect.async<void>((resumeWait) => {
            const waiter = () => {
              if (check()) resumeWait(Effect.void)
              else if (ended) resumeWait(Effect.dieMessage(`${what}: the stream ended first`))
              else return
              waiters.delete(waiter)
            }
            waiters.add(waiter)
            waiter()
            return Effect.sync(() => waiters.delete(waiter))
          }),
        close: () => req.destroy()
      }))
    })
    req.on("error", (e) => resume(Effect.die(e)))
  })

/** The payloads of a client's task events, parsed. */
export const payloads = (client: SseClient) =>
  client.events.filter((e) => e.event === "task.status").map((e) => ({ id: e.id!, ...JSON.parse(e.data) }))

/** The sequence part of `<epoch>-<seq>` cursors. */
export const seqOf = (cursor: string) => Number(cursor.split("-")[1])
