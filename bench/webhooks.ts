/**
 * npm run bench:webhooks — a bounded load generator on loopback posting validly signed webhooks (OpenAI and
 * Replicate Standard Webhooks, fal Ed25519, Luma URL tokens; 10% exact duplicates) at a fixed concurrency to
 * one runner process (gateway only: INBOX_PROCESSOR_ENABLED=false) on real PostgreSQL. Prints accepted/s,
 * p50/p99/p999 of the 204s, and the runner's CPU and RSS.
 *
 *   BENCH_SECONDS (15)  BENCH_CONCURRENCY (64)  DATABASE_URL (admin URL; a fresh database is created)
 */
import { spawn } from "node:child_process"
import { generateKeyPairSync, sign } from "node:crypto"
import * as fs from "node:fs"
import * as http from "node:http"
import * as net from "node:net"
import pg from "pg"
import { Webhook } from "standardwebhooks"
import { callbackQuery, falSigningString } from "../src/providers/signatures.js"
import { freePort } from "./support.js"

const SECONDS = Number(process.env.BENCH_SECONDS ?? 15)
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 64)
const adminUrl = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres"
const OPENAI = "whsec_" + Buffer.from("bench-openai-secret-0123456789ab").toString("base64")
const REPLICATE = "whsec_" + Buffer.from("bench-replicate-secret-012345678").toString("base64")
const TOKEN = "bench-callback-token-secret"
const fal = generateKeyPairSync("ed25519")

interface Req {
  readonly path: string
  readonly body: string
  readonly headers: Record<string, string>
}

let n = 0
let lumaAttempts: ReadonlyArray<string> = []
const makeRequest = (): Req => {
  const i = n++
  const now = new Date()
  const ts = Math.floor(now.getTime() / 1000)
  switch (i % 4) {
    case 0: {
      const body = JSON.stringify({
        id: `evt_${i}`,
        object: "event",
        created_at: ts,
        type: "video.completed",
        data: { id: `video_${i}` }
      })
      const id = `msg_${i}`
      return {
        path: "/webhooks/openai",
        body,
        headers: {
          "webhook-id": id,
          "webhook-timestamp": String(ts),
          "webhook-signature": new Webhook(OPENAI).sign(id, now, body)
        }
      }
    }
    case 1: {
      const body = JSON.stringify({ id: `pred_${i}`, status: "processing", output: null })
      const id = `msg_${i}`
      return {
        path: "/webhooks/replicate",
        body,
        headers: {
          "webhook-id": id,
          "webhook-timestamp": String(ts),
          "webhook-signature": new Webhook(REPLICATE).sign(id, now, body)
        }
      }
    }
    case 2: {
      const body = JSON.stringify({
        request_id: `req_${i}`,
        status: "OK",
        payload: { video: { url: "https://x/v.mp4" } }
      })
      const sig = sign(
        null,
        Buffer.from(falSigningString(`req_${i}`, "u", String(ts), Buffer.from(body))),
        fal.privateKey
      )
      return {
        path: "/webhooks/fal",
        body,
        headers: {
          "x-fal-webhook-request-id": `req_${i}`,
          "x-fal-webhook-user-id": "u",
          "x-fal-webhook-timestamp": String(ts),
          "x-fal-webhook-signature": sig.toString("hex")
        }
      }
    }
    default: {
      // a Luma callback URL works only for an open attempt of a task: one of those made before the run
      const attempt = lumaAttempts[i % lumaAttempts.length]!
      return {
        path: `/webhooks/luma?${callbackQuery(TOKEN, "luma", attempt, now)}`,
        body: JSON.stringify({ id: `gen_${i}`, state: "dreaming" }),
        headers: {}
      }
    }
  }
}

const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY })
const post = (port: number, r: Req) =>
  new Promise<number>((resolve, reject) => {
    const req = http.request({
      host: "127.0.0.1",
      port,
      path: r.path,
      method: "POST",
      agent,
      headers: { ...r.headers, "content-type": "application/json", "content-length": Buffer.byteLength(r.body) }
    }, (res) => {
      res.resume()
      res.on("end", () => resolve(res.statusCode ?? 0))
    })
    req.on("error", reject)
    req.end(r.body)
  })

const cpuTicks = (pid: number) => {
  const fields = fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ")
  return Number(fields[11]) + Number(fields[12]) // utime + stime, in clock ticks (100/s)
}
const rssMiB = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, "utf8"))![1]) / 1024

const percentile = (xs: Array<number>, p: number) => xs[Math.min(xs.length - 1, Math.floor(p * xs.length))] ?? 0

const main = async () => {
  const jwks = http.createServer((_, res) => {
    res.setHeader("content-type", "application/json")
    res.end(JSON.stringify({ keys: [fal.publicKey.export({ format: "jwk" })] }))
  })
  await new Promise<void>((r) => jwks.listen(0, "127.0.0.1", r))
  const admin = new pg.Client({ connectionString: adminUrl })
  await admin.connect()
  const dbName = `bench_webhooks_${Date.now().toString(36)}`
  await admin.query(`CREATE DATABASE ${dbName}`)
  const url = new URL(adminUrl)
  url.pathname = `/${dbName}`
  const [httpPort, runnerPort] = [await freePort(), await freePort()]
  const nodeArgs = (process.env.RUNNER_NODE_ARGS ?? "").split(" ").filter((a) => a.length > 0)
  // the runner as `npm start` runs it
  const runner = spawn(process.execPath, [...nodeArgs, "--import", "tsx", "src/runners/main.ts"], {
    env: {
      ...process.env,
      DATABASE_URL: url.toString(),
      HTTP_PORT: String(httpPort),
      RUNNER_PORT: String(runnerPort),
      OPENAI_WEBHOOK_SECRET: OPENAI,
      REPLICATE_WEBHOOK_SECRET: REPLICATE,
      CALLBACK_TOKEN_SECRET: TOKEN,
      FAL_USER_ID: "u",
      FAL_JWKS_URL: `http://127.0.0.1:${(jwks.address() as net.AddressInfo).port}/jwks.json`,
      INBOX_PROCESSOR_ENABLED: "false",
      LOG_LEVEL: "WARN"
    },
    stdio: ["ignore", "ignore", "inherit"]
  })
  try {
    for (let i = 0; i < 240; i++) {
      if (runner.exitCode !== null) throw new Error(`runner exited with ${runner.exitCode}`)
      try {
        if ((await fetch(`http://127.0.0.1:${httpPort}/openapi.json`)).ok) break
      } catch { /* starting */ }
      await new Promise((r) => setTimeout(r, 250))
    }
    // open Luma attempts for the callbacks, polled by nobody during the run (their next poll is a day away)
    const setup = new pg.Client({ connectionString: url.toString() })
    await setup.connect()
    const project = crypto.randomUUID()
    await setup.query("INSERT INTO projects (project_id, tenant_id, stream_epoch) VALUES ($1, $1, 1)", [project])
    lumaAttempts = (await setup.query(
      `WITH x AS (SELECT i, gen_random_uuid() AS task, gen_random_uuid() AS attempt FROM generate_series(1, 1000) i),
       t AS (INSERT INTO generation_tasks (id, tenant_id, project_id, user_id, idempotency_key, request_hash, request,
               status, stage, last_seq, current_attempt_id, home_region, write_epoch)
             SELECT task, $1, $1, $1, 'bench-' || i, 'h', '{}', 'running', 'generating', 0, attempt, 'local', 1 FROM x
             RETURNING id)
       INSERT INTO task_attempts (id, task_id, attempt_no, provider, model, client_request_id, provider_task_id,
         submit_state, next_poll_at)
       SELECT attempt, task, 1, 'luma', 'ray-2', 'bench-' || i, 'gen-bench-' || i, 'RUNNING', now() + interval '1 day'
       FROM x WHERE (SELECT count(*) FROM t) > 0
       RETURNING id`,
      [project]
    )).rows.map((r: { id: string }) => r.id)
    await setup.end()
    // warm up (JIT, pool, JWKS cache)
    for (let i = 0; i < 200; i++) await post(httpPort, makeRequest())

    // requests are signed before the clock starts, so the load generator spends its CPU on sending only
    const prepared = Array.from({ length: 60_000 }, makeRequest)
    let next = 0
    const latencies: Array<number> = []
    const statuses = new Map<number, number>()
    const sent: Array<Req> = []
    const cpu0 = cpuTicks(runner.pid!)
    const started = performance.now()
    const deadline = started + SECONDS * 1000
    await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
      while (performance.now() < deadline) {
        const duplicate = sent.length > 0 && Math.random() < 0.1
        const r = duplicate ? sent[Math.floor(Math.random() * sent.length)]! : prepared[next++] ?? makeRequest()
        if (!duplicate) sent.push(r)
        const t0 = performance.now()
        const status = await post(httpPort, r)
        statuses.set(status, (statuses.get(status) ?? 0) + 1)
        if (status === 204) latencies.push(performance.now() - t0)
      }
    }))
    const elapsed = (performance.now() - started) / 1000
    const cpuSeconds = (cpuTicks(runner.pid!) - cpu0) / 100
    const rss = rssMiB(runner.pid!)
    latencies.sort((a, b) => a - b)
    const rows = await new pg.Client({ connectionString: url.toString() })
    await rows.connect()
    const stored = (await rows.query("SELECT count(*)::int AS n FROM provider_callback_inbox")).rows[0].n
    await rows.end()
    console.log(`webhooks: ${SECONDS} s at concurrency ${CONCURRENCY}, 4 providers, 10% duplicates`)
    console.log(
      `statuses: ${JSON.stringify(Object.fromEntries(statuses))}; inbox rows ${stored} (unique sent ${
        sent.length + 200
      })`
    )
    console.log(`accepted (204): ${(latencies.length / elapsed).toFixed(0)}/s`)
    console.log(
      `latency of 204s: p50 ${percentile(latencies, 0.5).toFixed(1)} ms, p99 ${
        percentile(latencies, 0.99).toFixed(1)
      } ms, p999 ${percentile(latencies, 0.999).toFixed(1)} ms`
    )
    console.log(`runner: CPU ${(cpuSeconds / elapsed * 100).toFixed(0)}% of one core, RSS ${rss.toFixed(0)} MiB`)
  } finally {
    runner.kill("SIGTERM")
    await new Promise((r) => runner.on("exit", r))
    await admin.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`)
    await admin.end()
    jwks.close()
    agent.destroy()
  }
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
