// The load generator of npm run bench:webhooks (forked by bench/webhooks.ts, driven over IPC), kept out of the
// bench's own process so that the servers measured are not sharing a thread with it. Each worker thread holds its
// share of raw keep-alive TCP connections (one request in flight each, spread over the given ports) and posts
// Standard Webhooks callbacks (OpenAI shape, HMAC-SHA256 signed as the standardwebhooks library signs), 10% of them
// exact duplicates of one it sent before. Requests are signed before the clock starts.
//
//   { type: "run", mode: "closed" | "open", ports, connections, seconds, rate, secret, tag, workers }
//     closed: every connection sends its next request when the last is answered (throughput);
//     open: `rate` requests/s scheduled at fixed times whatever the answers (latency at an offered load: a request
//     waiting for a free connection counts from its scheduled time, so queueing is in the figure).
//   answers { type: "result", statuses, latencies (ms, of the 204s), elapsed (s), late (not answered by the end) }
import { createHmac } from "node:crypto"
import * as net from "node:net"
import { isMainThread, parentPort, Worker, workerData } from "node:worker_threads"

const DUPLICATES = 0.1

const signer = (secret) => {
  const key = Buffer.from(secret.slice("whsec_".length), "base64")
  return (id, ts, body) => `v1,${createHmac("sha256", key).update(`${id}.${ts}.${body}`).digest("base64")}`
}

const makeRequests = (spec, count) => {
  const sign = signer(spec.secret)
  const ts = Math.floor(Date.now() / 1000)
  const requests = []
  for (let i = 0; i < count; i++) {
    const id = `msg_${spec.tag}_${i}`
    const body = JSON.stringify({
      id: `evt_${spec.tag}_${i}`,
      object: "event",
      created_at: ts,
      type: "video.completed",
      data: { id: `video_${spec.tag}_${i}` }
    })
    requests.push(
      `POST /webhooks/openai HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\nwebhook-id: ${id}\r\nwebhook-timestamp: ${ts}\r\n` +
        `webhook-signature: ${sign(id, ts, body)}\r\n\r\n${body}`
    )
  }
  return requests
}

/** A keep-alive connection with one request in flight; `done(status)` when its answer is complete. */
const connect = (port, onAnswer) => {
  const conn = { socket: null, buf: "", busy: false, t0: 0 }
  const open = () => {
    conn.buf = ""
    conn.socket = net.connect(port, "127.0.0.1")
    conn.socket.setNoDelay(true)
    conn.socket.on("data", (chunk) => {
      conn.buf += chunk.toString("latin1")
      for (;;) {
        const end = conn.buf.indexOf("\r\n\r\n")
        if (end === -1) return
        const length = /\r\ncontent-length: *(\d+)/i.exec(conn.buf.slice(0, end))
        const total = end + 4 + (length === null ? 0 : Number(length[1]))
        if (conn.buf.length < total) return
        const status = Number(conn.buf.slice(9, 12))
        conn.buf = conn.buf.slice(total)
        conn.busy = false
        onAnswer(conn, status)
      }
    })
    conn.socket.on("error", () => {})
    conn.socket.on("close", () => {
      const lost = conn.busy
      conn.busy = false
      if (!stopped) open()
      if (lost) onAnswer(conn, 0)
    })
  }
  let stopped = false
  conn.stop = () => {
    stopped = true
    conn.socket.destroy()
  }
  conn.send = (raw, t0) => {
    conn.busy = true
    conn.t0 = t0
    conn.socket.write(raw)
  }
  open()
  return conn
}

const runShare = (spec) =>
  new Promise((resolve) => {
    const expected = spec.mode === "open" ? Math.ceil(spec.rate * spec.seconds) + 100 : 6_000 * spec.seconds
    const fresh = makeRequests(spec, expected)
    const sent = []
    let next = 0
    const nextRequest = () => {
      if (sent.length > 0 && Math.random() < DUPLICATES) return sent[Math.floor(Math.random() * sent.length)]
      const r = fresh[next++ % fresh.length]
      sent.push(r)
      return r
    }
    const statuses = {}
    const latencies = []
    let recording = true
    let outstanding = 0
    const backlog = [] // open mode: scheduled times waiting for a free connection
    const idle = []
    const onAnswer = (conn, status) => {
      outstanding--
      if (recording) {
        statuses[status] = (statuses[status] ?? 0) + 1
        if (status === 204) latencies.push(performance.now() - conn.t0)
      }
      if (spec.mode === "closed") {
        if (performance.now() < deadline) send(conn, performance.now())
        else finishIfDone()
      } else if (backlog.length > 0) send(conn, backlog.shift())
      else {
        idle.push(conn)
        finishIfDone()
      }
    }
    const send = (conn, t0) => {
      outstanding++
      conn.send(nextRequest(), t0)
    }
    const conns = spec.ports.flatMap((port, p) =>
      Array.from(
        { length: Math.floor(spec.connections / spec.ports.length) + (p < spec.connections % spec.ports.length) },
        () => connect(port, onAnswer)
      )
    )
    const started = performance.now()
    const deadline = started + spec.seconds * 1000
    let ended = 0
    const finish = () => {
      if (ended !== 0) return
      ended = performance.now()
      clearInterval(ticker)
      clearTimeout(grace)
      recording = false
      for (const c of conns) c.stop()
      resolve({
        statuses,
        latencies,
        elapsed: (Math.min(ended, deadline) - started) / 1000,
        late: outstanding + backlog.length
      })
    }
    const finishIfDone = () => {
      if (performance.now() >= deadline && outstanding === 0) finish()
    }
    // in open mode, answers still coming after the end get 5 s; closed mode waits only for those in flight
    const grace = setTimeout(finish, spec.seconds * 1000 + 5_000)
    let scheduled = 0
    const ticker = spec.mode === "open"
      ? setInterval(() => {
        const now = Math.min(performance.now(), deadline)
        const due = Math.floor(((now - started) / 1000) * spec.rate)
        for (; scheduled < due; scheduled++) {
          const at = started + (scheduled * 1000) / spec.rate
          const conn = idle.pop()
          if (conn === undefined) backlog.push(at)
          else send(conn, at)
        }
        if (performance.now() >= deadline) {
          clearInterval(ticker)
          finishIfDone()
        }
      }, 1)
      : undefined
    if (spec.mode === "closed") for (const c of conns) send(c, performance.now())
    else idle.push(...conns)
  })

if (!isMainThread) {
  parentPort.postMessage(await runShare(workerData))
} else {
  process.on("message", async (message) => {
    if (message.type === "exit") process.exit(0)
    if (message.type !== "run") return
    const workers = Math.max(1, message.workers ?? 1)
    const shares = await Promise.all(Array.from({ length: workers }, (_, w) =>
      new Promise((resolve, reject) => {
        const worker = new Worker(new URL(import.meta.url), {
          workerData: {
            ...message,
            tag: `${message.tag}w${w}`,
            rate: message.rate / workers,
            connections: Math.max(1, Math.round(message.connections / workers))
          }
        })
        worker.once("message", resolve)
        worker.once("error", reject)
      })))
    const statuses = {}
    for (const s of shares) for (const [k, v] of Object.entries(s.statuses)) statuses[k] = (statuses[k] ?? 0) + v
    process.send({
      type: "result",
      statuses,
      latencies: shares.flatMap((s) => s.latencies),
      elapsed: Math.max(...shares.map((s) => s.elapsed)),
      late: shares.reduce((n, s) => n + s.late, 0)
    })
  })
  process.send({ type: "ready" })
}
