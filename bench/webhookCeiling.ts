/**
 * The ceiling of npm run bench:webhooks: a bare `node:http` server (no Effect, no routing, no metrics, no trace
 * ids) doing what a webhook must cost at least: read the body, the same Standard Webhooks verification
 * (verifyStandardWebhook), JSON.parse, and the same grouped inbox insert (CallbackInbox's statement and row shape,
 * through `pg` as @effect/sql-pg uses it) with the same batch size and number of writers; 204 once the batch is
 * committed. Run as a child process: HTTP_PORT, DATABASE_URL, OPENAI_WEBHOOK_SECRET, WRITERS (4, the runner's
 * INBOX_WRITE_PARALLELISM default; bench:webhooks passes the runner's).
 */
import { createHash } from "node:crypto"
import * as http from "node:http"
import pg from "pg"
import { INBOX_INSERT, inboxBatch, type InboxEntry } from "../src/intake/CallbackInbox.js"
import { INBOX_MAX_BATCH, INBOX_MORE_WHEN_QUEUED } from "../src/intake/inboxSettings.js"
import { INBOX_CHANNEL } from "../src/persistence/channels.js"
import { verifyStandardWebhook } from "../src/providers/signatures.js"

const secrets = [{ version: "current", secret: process.env.OPENAI_WEBHOOK_SECRET! }]
const writers = Number(process.env.WRITERS ?? 4)
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: writers })

type Waiting = { readonly entry: InboxEntry; readonly done: (ok: boolean) => void }
const queue: Array<Waiting> = []
let busy = 0
/** INSERTs sent and the callbacks they carried (GET /stats): the bench prints callbacks per INSERT, as the runner's. */
const written = { statements: 0, rows: 0 }
const drain = () => {
  // as the runner's group commit: while a batch is out, the next waits for INBOX_MORE_WHEN_QUEUED callbacks
  while (busy < writers && queue.length >= (busy === 0 ? 1 : INBOX_MORE_WHEN_QUEUED)) {
    const batch = queue.splice(0, INBOX_MAX_BATCH)
    busy++
    written.statements++
    written.rows += batch.length
    const insert = (ws: Array<Waiting>) => pool.query(INBOX_INSERT, [inboxBatch(ws.map((w) => w.entry)), INBOX_CHANNEL])
    // as CallbackInbox: a failed batch (two batches holding the same duplicate can deadlock) is written row by row
    insert(batch).then(
      () => batch.forEach((w) => w.done(true)),
      () => Promise.all(batch.map((w) => insert([w]).then(() => w.done(true), () => w.done(false))))
    ).finally(() => {
      busy--
      drain()
    })
  }
}

const answer = (res: http.ServerResponse, status: number) => res.writeHead(status, { "content-length": 0 }).end()

http.createServer((req, res) => {
  if (req.url === "/stats") {
    return void res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(written))
  }
  const chunks: Array<Buffer> = []
  req.on("data", (c: Buffer) => chunks.push(c))
  req.on("end", () => {
    const body = Buffer.concat(chunks)
    const verified = verifyStandardWebhook({
      secrets,
      headers: req.headers as Record<string, string>,
      body,
      now: new Date(),
      toleranceSeconds: 300
    })
    if (verified._tag === "Left") return answer(res, 401)
    const text = body.toString("utf8")
    let event: { data?: { id?: unknown } }
    try {
      event = JSON.parse(text)
    } catch {
      return answer(res, 400)
    }
    const payloadHash = createHash("sha256").update(body).digest("hex")
    queue.push({
      entry: {
        provider: "openai",
        dedupKey: `id:${verified.right.eventId}`,
        providerEventId: verified.right.eventId,
        providerTaskId: typeof event.data?.id === "string" ? event.data.id : null,
        clientRequestId: null,
        attemptId: null,
        providerOccurredAt: verified.right.timestamp,
        signatureKeyVersion: verified.right.keyVersion,
        payloadHash,
        body: text,
        traceId: ""
      },
      done: (ok) => answer(res, ok ? 204 : 503)
    })
    drain()
  })
}).listen(Number(process.env.HTTP_PORT), "127.0.0.1", () => process.send?.({ type: "ready" }))
