// The ceiling of npm run bench:sse, measured in the same run: a bare node:http SSE server doing only what the
// gateway's delivery must do, with nothing of ours. It answers GET /v1/projects/{project}/events with the SSE head and
// `retry:`, keeps one Set of responses per project, SUBSCRIBEs (one ioredis connection) to a project's channel on its
// first stream, and writes each bus message to the project's streams as an SSE frame (its cursor as `id:`). No auth,
// no cursor replay, no limits, no buffers: what the gateway does beyond this is its own cost.
// Env: PORT, REDIS_URL, REDIS_KEY_PREFIX. Prints "listening <port>" when ready. Loaded with bench/memoryProbe.mjs.
import { Redis } from "ioredis"
import * as http from "node:http"

const prefix = process.env.REDIS_KEY_PREFIX ?? ""
const subscriber = new Redis(process.env.REDIS_URL ?? "redis://127.0.0.1:6379")
const streams = new Map()
const PATH = /^\/v1\/projects\/([^/]+)\/events$/

subscriber.on("message", (channel, message) => {
  const set = streams.get(channel)
  if (set === undefined) return
  const { cursor } = JSON.parse(message)
  const frame = `id: ${cursor}\nevent: task.status\ndata: ${message}\n\n`
  for (const res of set) res.write(frame)
})

const server = http.createServer((req, res) => {
  const match = PATH.exec(req.url ?? "")
  if (match === null) return void res.writeHead(404).end()
  req.socket.setNoDelay(true)
  const channel = `${prefix}project:${match[1]}`
  let set = streams.get(channel)
  if (set === undefined) {
    set = new Set()
    streams.set(channel, set)
    void subscriber.subscribe(channel)
  }
  set.add(res)
  res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" })
  res.write("retry: 3000\n\n")
  res.once("close", () => set.delete(res))
})
server.listen(Number(process.env.PORT ?? 0), "127.0.0.1", () => console.log(`listening ${server.address().port}`))
process.on("SIGTERM", () => process.exit(0))
