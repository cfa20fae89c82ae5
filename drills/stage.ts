/**
 * The stage every drill plays on: a fresh database, the provider simulator as its own process (it outlives every
 * runner, as a real provider does), runner processes on fixed ports (a restarted runner keeps its address), the API
 * and admin clients, and a workload of tasks created through the public API. Everything it starts it stops.
 */
import { Effect } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as http from "node:http"
import * as os from "node:os"
import * as path from "node:path"
import pg from "pg"
import { freePort, sleep, startRunnerProcess, stopProcess } from "../bench/support.js"
import { nginxConf } from "../src/cli/cluster/nginx.js"
import { TokenSigner } from "../src/http/Auth.js"
import { allRoles } from "../src/runners/Roles.js"
import type { TenantId, UserId } from "../src/schema/ids.js"
import { simulatorEnv } from "../src/simulator/embedded.js"

export const AUTH_SECRET = "drill-secret-0123456789abcdef0123456789"
const ADMIN_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres"
export const verbose = process.env.DRILL_VERBOSE === "1"

export const log = (line: string) => console.log(`  ${new Date().toISOString().slice(11, 23)} ${line}`)

/** Waits until `check` holds (polled every 100 ms); else fails naming `what`. Returns how long it took, in ms. */
export const waitFor = async (what: string, check: () => Promise<boolean> | boolean, withinMs: number) => {
  const start = performance.now()
  let lastError: unknown
  while (performance.now() - start < withinMs) {
    try {
      if (await check()) return performance.now() - start
    } catch (e) {
      lastError = e
    }
    await sleep(100)
  }
  throw new Error(`${what}: not within ${withinMs / 1000} s${lastError === undefined ? "" : ` (${String(lastError)})`}`)
}

const sign = (f: (s: TokenSigner) => Effect.Effect<string, unknown>) => {
  process.env.AUTH_SECRET = AUTH_SECRET
  return Effect.runPromise(Effect.flatMap(TokenSigner, f).pipe(Effect.provide(TokenSigner.Default)))
}

/** A JSON request with a timeout (a silent runner must not hang a drill): its status and body. */
export const request = async (url: string, init: RequestInit & { token?: string } = {}) => {
  const res = await fetch(url, {
    ...init,
    headers: {
      "content-type": "application/json",
      ...(init.token === undefined ? {} : { authorization: `Bearer ${init.token}` }),
      ...init.headers
    },
    signal: AbortSignal.timeout(10_000)
  })
  const text = await res.text()
  let body: unknown = text
  try {
    body = text === "" ? null : JSON.parse(text)
  } catch {
    // not JSON: kept as text
  }
  return { status: res.status, body }
}

export interface Runner {
  readonly name: string
  readonly httpPort: number
  readonly runnerPort: number
  readonly url: string
  /** Settings of this runner only (its region, say). */
  readonly env: Record<string, string>
  child: ChildProcess | undefined
}

export interface StageOptions {
  /** Names the database and the Redis key prefix. */
  readonly name: string
  readonly runners?: number
  /** Extra settings for every runner. */
  readonly env?: Record<string, string>
  /** Events through the RocketMQ at ROCKETMQ_ENDPOINTS (else the in-process queue). */
  readonly rocketmq?: boolean
  /** The admin URL of the PostgreSQL the stage creates its database on (the machine's by default). */
  readonly adminUrl?: string
  /** The URL the runners use for that database, when it differs (a DSN with two hosts). */
  readonly runnerDatabaseUrl?: (database: string) => string
  /** Redis (REDIS_URL of the environment by default) and RocketMQ (ROCKETMQ_ENDPOINTS) of the stage's own. */
  readonly redisUrl?: string
  readonly rocketmqEndpoints?: string
  /** One entry for callbacks, the API and streams in front of every runner: Debian's nginx, as npm run cluster. */
  readonly nginx?: boolean
}

export const PROVIDERS = ["openai", "runway", "replicate"] as const
export type Provider = (typeof PROVIDERS)[number]
const BODIES: Record<Provider, Record<string, unknown>> = {
  openai: { provider: "openai", model: "sora-2", prompt: "a drill", duration_seconds: 4 },
  runway: { provider: "runway", model: "gen4.5", prompt: "a drill", duration_seconds: 5 },
  replicate: { provider: "replicate", model: "kwaivgi/kling-v2.1", prompt: "a drill", duration_seconds: 5 }
}

export type Stage = Awaited<ReturnType<typeof openStage>>

/** nginx (src/cli/cluster/nginx.ts's configuration) on a free port in front of `runners`, every role on each. */
const startNginx = async (name: string, runners: ReadonlyArray<Runner>) => {
  const port = await freePort()
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `drill-${name}-nginx-`))
  fs.chmodSync(dir, 0o777) // its workers (nobody, when started as root) write their buffers there
  const members = runners.map((r, i) => ({
    index: i + 1,
    httpPort: r.httpPort,
    runnerPort: r.runnerPort,
    roles: allRoles
  }))
  const conf = path.join(dir, "nginx.conf")
  fs.writeFileSync(conf, nginxConf({ listenHost: "127.0.0.1", listenPort: port, members, dir }))
  // its log says each refused connection to a killed runner: only with DRILL_VERBOSE
  const child = spawn("/usr/sbin/nginx", ["-p", dir, "-c", conf, "-e", "stderr"], {
    stdio: ["ignore", "ignore", verbose ? "inherit" : "ignore"]
  })
  await waitFor("nginx listens", async () => {
    try {
      await fetch(`http://127.0.0.1:${port}/`, { signal: AbortSignal.timeout(1_000) })
      return true
    } catch {
      return false
    }
  }, 30_000)
  return {
    url: `http://127.0.0.1:${port}`,
    stop: () => {
      child.kill("SIGQUIT")
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }
}

export const openStage = async (o: StageOptions) => {
  const adminUrl = o.adminUrl ?? ADMIN_URL
  const admin = new pg.Client({ connectionString: adminUrl })
  admin.on("error", () => undefined) // a drill may restart the database under it: only the final DROP needs it
  await admin.connect()
  const database = `drill_${o.name.replace(/[^a-z0-9]/g, "_")}_${Date.now().toString(36)}`
  await admin.query(`CREATE DATABASE ${database}`)
  const dbUrl = new URL(adminUrl)
  dbUrl.pathname = `/${database}`
  const db = new pg.Pool({ connectionString: dbUrl.toString(), max: 3 })
  db.on("error", () => undefined) // a drill stops the database under it: the next query says so
  const objects = fs.mkdtempSync(path.join(os.tmpdir(), `drill-${o.name}-`))
  const simPort = await freePort()
  const sim = `http://127.0.0.1:${simPort}`
  const runners: Array<Runner> = []
  for (let i = 0; i < (o.runners ?? 2); i++) {
    const [httpPort, runnerPort] = [await freePort(), await freePort()]
    runners.push({
      name: String.fromCharCode(65 + i),
      httpPort,
      runnerPort,
      url: `http://127.0.0.1:${httpPort}`,
      env: {},
      child: undefined
    })
  }
  // callbacks go to the nginx entry, or else to the first runner, which the drills keep alive
  const entry = o.nginx === true ? await startNginx(o.name, runners) : undefined
  const platform = entry?.url ?? runners[0]!.url
  const simulator = spawn(process.execPath, ["--import", "tsx", "src/simulator/main.ts"], {
    env: { ...process.env, SIM_PORT: String(simPort), SIM_OPENAI_WEBHOOK_URL: `${platform}/webhooks/openai` },
    stdio: ["ignore", verbose ? "inherit" : "ignore", "inherit"]
  })
  await waitFor("the simulator answers", async () => (await request(`${sim}/_sim/faults`)).status === 200, 60_000)

  const runnerEnv = (): Record<string, string> => ({
    DATABASE_URL: o.runnerDatabaseUrl?.(database) ?? dbUrl.toString(),
    AUTH_SECRET,
    READINESS_GRACE: "0 seconds",
    ...((o.redisUrl ?? process.env.REDIS_URL) === undefined ? {} : { REDIS_URL: o.redisUrl ?? process.env.REDIS_URL! }),
    REDIS_KEY_PREFIX: `${database}:`,
    ROCKETMQ_ENDPOINTS: o.rocketmqEndpoints ?? (o.rocketmq === true ? (process.env.ROCKETMQ_ENDPOINTS ?? "") : ""),
    OBJECT_STORE_DIR: objects,
    ...simulatorEnv(platform, sim, [...PROVIDERS]),
    RUNWAY_LOOKUP: "true",
    OPENAI_LOOKUP: "true",
    REPLICATE_LOOKUP: "true",
    SWEEP_INTERVAL: "1 second",
    SWEEP_GRACE: "2 seconds",
    RECONCILE_INTERVAL: "2 seconds",
    METRICS_SAMPLE_INTERVAL: "1 second",
    LOG_LEVEL: verbose ? "INFO" : "ERROR",
    ...o.env
  })

  const start = async (r: Runner) => {
    const started = await startRunnerProcess({ ...runnerEnv(), ...r.env }, {
      ports: { http: r.httpPort, runner: r.runnerPort },
      output: verbose ? "inherit" : "ignore"
    })
    started.health.stop()
    r.child = started.child
  }
  /** One more runner, with settings of its own, started. */
  const addRunner = async (name: string, env: Record<string, string>) => {
    const [httpPort, runnerPort] = [await freePort(), await freePort()]
    const r: Runner = { name, httpPort, runnerPort, url: `http://127.0.0.1:${httpPort}`, env, child: undefined }
    runners.push(r)
    await start(r)
    return r
  }
  const stop = async (r: Runner, signal: NodeJS.Signals) => {
    if (r.child !== undefined) await stopProcess(r.child, signal)
    r.child = undefined
  }
  await Promise.all(runners.map(start))

  const tenant = crypto.randomUUID() as TenantId
  const token = await sign((s) => s.sign({ tenant_id: tenant, sub: crypto.randomUUID() as UserId, projects: "*" }))
  const operator = await sign((s) => s.signOperator(`drill-${o.name}`))
  const created = await request(`${platform}/v1/projects`, { method: "POST", token })
  if (created.status !== 201) throw new Error(`POST /v1/projects: ${created.status} ${JSON.stringify(created.body)}`)
  const project = (created.body as { project_id: string }).project_id

  const retried = { count: 0 }
  /** Every failed try of a task creation: when (Date.now()) and its status (0: no answer in time). */
  const failedTries: Array<{ readonly at: number; readonly status: number }> = []
  /**
   * Creates a task through the public API on `via`, as a careful client does: a 5xx (or no answer) is retried with the
   * same Idempotency-Key, up to 10 times. Its id once the 201 is in (an acknowledged task).
   */
  const createTask = async (provider: Provider, via: { readonly url: string } = { url: platform }) => {
    const key = crypto.randomUUID()
    let last = ""
    for (let attempt = 0; attempt < 10; attempt++) {
      const res = await request(`${via.url}/v1/projects/${project}/tasks`, {
        method: "POST",
        token,
        headers: { "idempotency-key": key },
        body: JSON.stringify(BODIES[provider])
      }).catch((e) => ({ status: 0, body: String(e) }))
      if (res.status === 201) return (res.body as { task_id: string }).task_id
      last = `${res.status} ${JSON.stringify(res.body)}`
      failedTries.push({ at: Date.now(), status: res.status })
      // 5xx or no answer (a runner killed mid-request: nginx's 502): the outcome is unknown, the same key is safe
      if (res.status < 500 && res.status !== 0) break
      retried.count++
      await sleep(500 * (attempt + 1))
    }
    throw new Error(`POST tasks (${provider}): ${last}`)
  }

  /** `n` tasks spread over `providers`, created through every live runner in turn, 4 at a time. */
  const workload = async (n: number, providers: ReadonlyArray<Provider> = PROVIDERS) => {
    const ids: Array<string> = new Array(n)
    let next = 0
    await Promise.all(Array.from({ length: Math.min(4, n) }, async () => {
      for (let i = next++; i < n; i = next++) {
        const live = runners.filter((r) => r.child !== undefined)
        ids[i] = await createTask(providers[i % providers.length]!, live[i % live.length])
      }
    }))
    return ids
  }

  const faults = (patch: Record<string, unknown>) =>
    request(`${sim}/_sim/faults`, { method: "POST", body: JSON.stringify(patch) })

  const adminCall = (path: string, init: RequestInit = {}, via: Runner = runners[0]!) =>
    request(`${via.url}${path}`, { ...init, token: operator })

  /** Shards per runner address (null: nobody) from the admin API. */
  const shards = async (via: Runner = runners[0]!) => {
    const res = await adminCall("/admin/shards", {}, via)
    const counts = new Map<string | null, number>()
    for (const s of (res.body as { shards: Array<{ runner: string | null }> }).shards) {
      counts.set(s.runner, (counts.get(s.runner) ?? 0) + 1)
    }
    return counts
  }

  /** A metric's values from a runner's /metrics, one per label set that contains every `labels` part. */
  const metricValues = async (r: Runner, name: string, labels: ReadonlyArray<string> = []) => {
    const text = await (await fetch(`${r.url}/metrics`, { signal: AbortSignal.timeout(5_000) })).text()
    return text.split("\n")
      .filter((l) => (l.startsWith(`${name} `) || l.startsWith(`${name}{`)) && labels.every((p) => l.includes(p)))
      .map((l) => Number(l.slice(l.lastIndexOf(" ") + 1)))
  }
  /** A metric's value summed over its label sets (those that contain every `labels` part). */
  const metric = async (r: Runner, name: string, labels: ReadonlyArray<string> = []) =>
    (await metricValues(r, name, labels)).reduce((sum, v) => sum + v, 0)

  /** How many of `ids` are terminal now. */
  const terminalCount = async (ids: ReadonlyArray<string>) =>
    Number(
      (await db.query(`SELECT count(*) FROM generation_tasks WHERE id = ANY($1::uuid[]) AND terminal_at IS NOT NULL`, [
        ids
      ])).rows[0].count
    )

  /**
   * A stream followed from before the project's first event (`follow`) against the project's stored events, once it
   * has them all (or a minute has passed): how many are stored, missing at the client, and repeated.
   */
  const streamCheck = async (stream: { readonly ids: ReadonlyArray<string> }) => {
    const stored = (await db.query(
      `SELECT e.cursor_seq::text AS c FROM task_events e WHERE e.project_id = $1 ORDER BY e.cursor_seq`,
      [project]
    )).rows.map((r) => String(r.c))
    await waitFor("the SSE client has every stored event", () => stream.ids.length >= stored.length, 60_000)
      .catch(() => undefined)
    const seen = new Set(stream.ids.map((id) => id.split("-").at(-1)))
    return {
      stored: stored.length,
      missing: stored.filter((c) => !seen.has(c)).length,
      duplicates: stream.ids.length - new Set(stream.ids).size
    }
  }

  const close = async () => {
    await Promise.all(runners.map((r) => stop(r, "SIGTERM")))
    entry?.stop()
    await stopProcess(simulator, "SIGTERM")
    await db.end().catch(() => undefined)
    await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`).catch(() => undefined)
    await admin.end().catch(() => undefined)
    fs.rmSync(objects, { recursive: true, force: true })
  }

  return {
    database,
    platform,
    db,
    sim,
    runners,
    project,
    token,
    start,
    addRunner,
    stop,
    createTask,
    retried,
    failedTries,
    workload,
    faults,
    adminCall,
    shards,
    metric,
    metricValues,
    terminalCount,
    streamCheck,
    close
  }
}

/** One SSE frame: its id (a cursor, if any), event type and data. */
export interface Frame {
  readonly id: string | undefined
  readonly event: string
  readonly data: string
}

/**
 * A project's SSE stream (from `lastEventId`, or from where it stands): every frame it received in order, and the
 * ids among them.
 */
export const follow = (url: string, token: string, lastEventId?: string) => {
  const frames: Array<Frame> = []
  const ids: Array<string> = []
  const req = http.get(url, {
    headers: {
      accept: "text/event-stream",
      authorization: `Bearer ${token}`,
      ...(lastEventId === undefined ? {} : { "last-event-id": lastEventId })
    }
  }, (res) =>
    sseFrames(res, (frame) => {
      frames.push(frame)
      if (frame.id !== undefined) ids.push(frame.id)
    }))
  req.on("error", () => undefined)
  return { frames, ids, close: () => req.destroy() }
}

/** Splits an SSE response into its frames (the blocks with data; comments are heartbeats), each as it completes. */
export const sseFrames = (res: http.IncomingMessage, onFrame: (frame: Frame) => void) => {
  let buffer = ""
  res.setEncoding("utf8")
  res.on("data", (chunk: string) => {
    buffer += chunk
    let end: number
    while ((end = buffer.indexOf("\n\n")) !== -1) {
      const block = buffer.slice(0, end)
      buffer = buffer.slice(end + 2)
      const data = /^data: (.*)$/m.exec(block)?.[1]
      if (data === undefined) continue
      onFrame({ id: /^id: (.*)$/m.exec(block)?.[1], event: /^event: (.*)$/m.exec(block)?.[1] ?? "message", data })
    }
  })
}
