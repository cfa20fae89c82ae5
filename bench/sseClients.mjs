// One client process of npm run bench:sse (forked by bench/sse.ts, driven over IPC): thousands of raw TCP SSE
// connections to one runner, each with its own file descriptor, so that the runner's connections are spread over
// several client processes (each has its own fd limit). It parses only the `id:` lines of what arrives and stamps
// each with Date.now() when its chunk arrived; `slow` connections pause after the response head and never read.
//
// Messages from the parent:
//   { type: "open", group, host, port, localAddress, token, projects, targets, slow, lastEventId, concurrency }
//     opens one connection per entry of `targets` (an index into `projects`); answers "opened"
//   { type: "record", on }   start/stop recording arrivals [project index, seq, arrival ms]
//   { type: "collect" }      answers "arrivals" (and forgets them) with gap/duplicate/close counts
//   { type: "resumeSlow", waitMs }   resumes the slow connections; after waitMs answers "slowResult"
//   { type: "exit" }
// and it reports { type: "progress", ok } every 50 opened connections.
import * as net from "node:net"

const connections = []
let recording = false
let arrivals = []
let gaps = 0
let duplicates = 0
let unexpectedCloses = 0
let closing = false

const send = (message) => process.send(message)

/** Reads the `id: <epoch>-<seq>` lines of complete lines in `text`; keeps the incomplete tail for the next chunk. */
const consume = (conn, chunk, at) => {
  const text = conn.carry.length > 0 ? conn.carry + chunk : chunk
  const end = text.lastIndexOf("\n")
  if (end === -1) {
    conn.carry = text.length > 65536 ? "" : text
    return
  }
  conn.carry = text.slice(end + 1)
  let i = text.startsWith("id: ") ? 0 : text.indexOf("\nid: ")
  while (i !== -1 && i < end) {
    const start = text[i] === "\n" ? i + 5 : i + 4
    const nl = text.indexOf("\n", start)
    const seq = Number(text.slice(text.lastIndexOf("-", nl) + 1, nl))
    if (conn.last !== 0 && seq !== conn.last + 1) {
      if (seq <= conn.last) duplicates++
      else gaps++
    }
    if (seq > conn.last) conn.last = seq
    if (recording) arrivals.push(conn.project, seq, at)
    i = text.indexOf("\nid: ", nl)
  }
}

const openOne = (spec, target, done) => {
  const conn = { project: target, last: 0, carry: "", head: "", open: false, slow: spec.slow, ended: false, bytes: 0 }
  let settled = false
  const settle = (error) => {
    if (settled) return
    settled = true
    clearTimeout(timer)
    done(error)
  }
  const socket = net.connect({ host: spec.host, port: spec.port, localAddress: spec.localAddress })
  conn.socket = socket
  const timer = setTimeout(() => {
    settle("timeout")
    socket.destroy()
  }, 60_000)
  socket.setNoDelay(true)
  socket.on("connect", () => {
    const lastEventId = spec.lastEventId ? `Last-Event-ID: ${spec.lastEventId}\r\n` : ""
    socket.write(
      `GET /v1/projects/${spec.projects[target]}/events HTTP/1.1\r\nHost: ${spec.host}:${spec.port}\r\n` +
        `Authorization: Bearer ${spec.token}\r\nAccept: text/event-stream\r\n${lastEventId}\r\n`
    )
  })
  socket.on("data", (data) => {
    const at = Date.now()
    if (conn.open) {
      if (conn.slow) conn.bytes += data.length
      else consume(conn, data.toString("latin1"), at)
      return
    }
    conn.head += data.toString("latin1")
    const headEnd = conn.head.indexOf("\r\n\r\n")
    if (headEnd === -1) return
    const status = Number(conn.head.slice(9, 12))
    if (status !== 200) {
      settle(`http_${status}`)
      socket.destroy()
      return
    }
    conn.open = true
    const rest = conn.head.slice(headEnd + 4)
    conn.head = ""
    connections.push(conn)
    if (conn.slow) socket.pause()
    else if (rest.length > 0) consume(conn, rest, at)
    settle(undefined)
  })
  socket.on("error", (e) => settle(e.code ?? String(e)))
  socket.on("close", () => {
    settle("closed_before_head")
    if (!conn.open || conn.ended) return
    conn.ended = true
    if (!conn.slow && !closing) unexpectedCloses++
  })
}

const open = (spec) => {
  const started = Date.now()
  const errors = {}
  let next = 0
  let inFlight = 0
  let ok = 0
  let failed = 0
  const failedTargets = []
  const pump = () => {
    while (inFlight < spec.concurrency && next < spec.targets.length) {
      const target = spec.targets[next++]
      inFlight++
      openOne(spec, target, (error) => {
        inFlight--
        if (error === undefined) {
          ok++
          if (ok % 50 === 0) send({ type: "progress", group: spec.group, ok })
        } else {
          failed++
          failedTargets.push(target)
          errors[error] = (errors[error] ?? 0) + 1
        }
        if (ok + failed === spec.targets.length) {
          send({ type: "opened", group: spec.group, ok, failed, failedTargets, errors, ms: Date.now() - started })
        } else pump()
      })
    }
  }
  if (spec.targets.length === 0) send({ type: "opened", group: spec.group, ok, failed, failedTargets, errors, ms: 0 })
  else pump()
}

process.on("message", (message) => {
  switch (message.type) {
    case "open":
      return open(message)
    case "record":
      recording = message.on
      return
    case "collect": {
      send({ type: "arrivals", arrivals, gaps, duplicates, unexpectedCloses })
      arrivals = []
      return
    }
    case "resumeSlow": {
      const slow = connections.filter((c) => c.slow)
      const endedBefore = slow.filter((c) => c.ended).length
      for (const c of slow) {
        c.bytes = 0
        c.socket.on("end", () => (c.ended = true))
        c.socket.resume()
      }
      setTimeout(() => {
        const ended = slow.filter((c) => c.ended || c.socket.destroyed || c.socket.readableEnded).length
        send({
          type: "slowResult",
          total: slow.length,
          ended,
          endedBefore,
          bytes: slow.reduce((n, c) => n + c.bytes, 0)
        })
      }, message.waitMs)
      return
    }
    case "exit": {
      closing = true
      for (const c of connections) c.socket.destroy()
      setTimeout(() => process.exit(0), 50)
      return
    }
  }
})
process.on("disconnect", () => process.exit(0))
send({ type: "ready" })
