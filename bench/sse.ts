/**
 * npm run bench:sse — M concurrent Server-Sent Events streams on one runner process while K events/s are committed.
 * One runner (`npm start`'s program) on a fresh database, with Redis Pub/Sub and the in-process queue: commit →
 * outbox relay → in-process queue → notification dispatcher → Redis → project feed → every SSE client of the
 * project (and, for whatever the bus did not bring within a tick, the feeds' tail of PostgreSQL). The clients are
 * raw TCP sockets in several plain Node child processes (bench/sseClients.mjs, each with its own file-descriptor
 * budget and loopback source address); they stamp every `id:` line with Date.now() when it arrives.
 *   1. open M streams over M / BENCH_FANOUT projects (time, failures); the runner's RSS and live heap after a full
 *      GC, before and after: per idle connection;
 *   2. BENCH_SLOW clients resume from cursor 0 of a project whose history is larger than the kernel's socket
 *      buffers (~4 MiB on loopback) and never read: the runner must cut them off (write deadline, 10 s);
 *   3. BENCH_RATE events/s for BENCH_SECONDS after a 3 s warm-up, committed by this process (one transaction per
 *      20 ms tick, stream order under the project rows' locks, as the product commits), spread uniformly over the
 *      projects: commit → client latency p50/p99/max, delivered vs expected, gaps, the runner's RSS per connection
 *      and CPU; split by a Redis subscriber here (commit → Redis) and the outbox rows (commit → relay); the
 *      runner's responsiveness (an unauthenticated request every 250 ms); optionally again at BENCH_RATE2;
 *   4. the slow clients read again: those the runner had disconnected see the end of their stream;
 *   5. every stream is closed at once (the client processes exit): how long the runner takes to let them go, and
 *      its responsiveness meanwhile.
 * The run takes 3–4 minutes at the default M, most of it opening the streams (the runner admits ~100–200/s here).
 * Goals (issue): M ≥ 20,000, ≤ 12 KiB per idle connection, p99 ≤ 100 ms at 1,000 events/s. This process raises its
 * soft fd limit to the hard one (children inherit it); the runner needs one fd per stream, so M is bounded by the
 * hard limit (`ulimit -Hn`), which only a privileged process can raise.
 *
 *   BENCH_CONNECTIONS (19500, at most the hard fd limit − 500)  BENCH_RATE (1000)  BENCH_SECONDS (20)
 *   BENCH_RATE2 (0 = no second phase; e.g. 500)  BENCH_FANOUT (4 streams per project)  BENCH_CLIENTS (4 processes)
 *   BENCH_SLOW (10)  BENCH_NODE_ARGS (node flags for the runner)  BENCH_RUNNER_ENV ("NAME=value ..." for the runner)
 *   DATABASE_URL (admin URL)  REDIS_URL
 */
import { Redis } from "ioredis"
import * as jose from "jose"
import { type ChildProcess, execFileSync, fork, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import pg from "pg"
import { ISSUER, TokenKinds } from "../src/http/Auth.js"
import { percentile, sleep, startRunnerProcess, stopProcess } from "./support.js"

// ---- file descriptors: raise the soft limit to the hard one, re-running this program under `ulimit -Sn` ----

const fdLimit = (which: "S" | "H") => {
  const out = execFileSync("sh", ["-c", `ulimit -${which}n`], { encoding: "utf8" }).trim()
  return out === "unlimited" ? Infinity : Number(out)
}
const HARD_FDS = fdLimit("H")
if (fdLimit("S") < HARD_FDS && process.env.BENCH_SSE_FDS_RAISED === undefined) {
  const limit = HARD_FDS === Infinity ? "unlimited" : String(HARD_FDS)
  const result = spawnSync(
    "sh",
    ["-c", `ulimit -Sn ${limit} && exec "$0" "$@"`, process.execPath, ...process.execArgv, ...process.argv.slice(1)],
    { stdio: "inherit", env: { ...process.env, BENCH_SSE_FDS_RAISED: "1" } }
  )
  process.exit(result.status ?? 1)
}
const SOFT_FDS = fdLimit("S")

// ---- settings ----

const GOAL_CONNECTIONS = 20_000
/** what the runner needs besides streams: database pool, Redis, listeners, the slow clients, files */
const RUNNER_SPARE_FDS = 500
const M = Number(process.env.BENCH_CONNECTIONS ?? Math.min(19_500, SOFT_FDS - RUNNER_SPARE_FDS))
const RATE = Number(process.env.BENCH_RATE ?? 1000)
const RATE2 = Number(process.env.BENCH_RATE2 ?? 0)
const SECONDS = Number(process.env.BENCH_SECONDS ?? 20)
const FANOUT = Number(process.env.BENCH_FANOUT ?? 4)
const CLIENTS = Number(process.env.BENCH_CLIENTS ?? 4)
const SLOW = Number(process.env.BENCH_SLOW ?? 10)
const HEAP_SNAPSHOTS = process.env.BENCH_HEAP_SNAPSHOTS === "1"
const NODE_ARGS = (process.env.BENCH_NODE_ARGS ?? "").split(" ").filter((a) => a.length > 0)
/** "NAME=value NAME2=value with spaces": a value runs up to the next NAME= */
const RUNNER_ENV = Object.fromEntries(
  [...(process.env.BENCH_RUNNER_ENV ?? "").matchAll(/([A-Z_][A-Z0-9_]*)=(.*?)(?=\s+[A-Z_][A-Z0-9_]*=|\s*$)/g)]
    .map((m) => [m[1]!, m[2]!])
)
const OPEN_CONCURRENCY = 64 // in-flight opens per client process
const WARMUP_SECONDS = 3
/** how long after a phase its stragglers are waited for */
const STRAGGLERS_MS = 10_000
const TASKS_PER_PROJECT = 2
/** the slow clients' project: 3,000 events of ~2.2 KiB (a long asset_id), more than the kernel buffers hold */
const HISTORY = 3000
const HISTORY_FILLER = 2000
/** the slow clients stay unread at least this long: the write deadline (10 s) after they back up, and a margin */
const SLOW_WAIT_MS = 25_000
const PROJECTS = Math.ceil(M / FANOUT)

const adminUrl = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres"
const redisUrl = process.env.REDIS_URL ?? "redis://127.0.0.1:6379"
const suffix = Date.now().toString(36)
const dbName = `bench_sse_${suffix}`
const prefix = `bench-sse-${suffix}:`
const AUTH_SECRET = `bench-sse-secret-${crypto.randomUUID()}`
const tenant = crypto.randomUUID()
const projects: Array<string> = Array.from({ length: PROJECTS }, () => crypto.randomUUID())
const tasks = projects.map(() => Array.from({ length: TASKS_PER_PROJECT }, () => crypto.randomUUID()))
const historyProject = crypto.randomUUID()
const historyTask = crypto.randomUUID()
const probeFile = path.join(os.tmpdir(), `bench-sse-memory-${process.pid}.json`)
/** one loopback source address per client process (this run's own /24: no TIME_WAIT of an earlier run in the way) */
const runByte = 1 + Math.floor(Math.random() * 254)

// ---- the runner's resources, from /proc ----

const CLK_TCK = (() => {
  try {
    return Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100
  } catch {
    return 100
  }
})()

/** a file of /proc/<pid>/, "" once the process is gone */
const procFile = (pid: number, name: string) => {
  try {
    return fs.readFileSync(`/proc/${pid}/${name}`, "utf8")
  } catch {
    return ""
  }
}

const rssKiB = (pid: number) => {
  const m = /VmRSS:\s+(\d+) kB/.exec(procFile(pid, "status"))
  return m === null ? NaN : Number(m[1])
}

/** user + system CPU seconds of a process (all its threads) */
const cpuSeconds = (pid: number) => {
  const stat = procFile(pid, "stat")
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK
}

const fdCount = (pid: number) => {
  try {
    return fs.readdirSync(`/proc/${pid}/fd`).length
  } catch {
    return NaN // gone
  }
}

/** A full GC in the runner (bench/memoryProbe.mjs answers SIGUSR2), then its live heap and RSS, in KiB. */
const probe = async (pid: number) => {
  fs.rmSync(probeFile, { force: true })
  process.kill(pid, "SIGUSR2")
  for (let i = 0; i < 100 && !fs.existsSync(probeFile); i++) await sleep(100)
  await sleep(200)
  const usage = JSON.parse(fs.readFileSync(probeFile, "utf8")) as { heapUsed: number }
  if (HEAP_SNAPSHOTS) await heapSnapshot(pid)
  return { heapKiB: usage.heapUsed / 1024, rssKiB: rssKiB(pid) }
}

/** Runners this process started that are still alive (a runner that never answered has no handle here). */
const ownRunnerPids = () =>
  fs.readdirSync("/proc").filter((d) => /^\d+$/.test(d)).map(Number).filter((pid) => {
    try {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1])
      return ppid === process.pid && fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("src/runners/main.ts")
    } catch {
      return false
    }
  })

/**
 * With BENCH_HEAP_SNAPSHOTS=1 (and BENCH_NODE_ARGS=--heapsnapshot-signal=SIGUSR1), a heap snapshot of the runner
 * beside each memory probe, written in its working directory: compare two in Chrome's Memory tab to see what a
 * stream holds.
 */
const heapSnapshot = async (pid: number) => {
  const count = () => fs.readdirSync(".").filter((f) => f.endsWith(".heapsnapshot")).length
  const before = count()
  process.kill(pid, "SIGUSR1")
  for (let i = 0; i < 600 && count() === before; i++) await sleep(100)
  await sleep(3000) // written to the end
}

// ---- client processes ----

interface Client {
  readonly child: ChildProcess
  readonly next: (type: string) => Promise<any>
  /** `ok` of the latest "progress" message */
  progress: number
}

const startClient = (): Promise<Client> => {
  const child = fork("bench/sseClients.mjs", [], { execArgv: [], stdio: ["ignore", "inherit", "inherit", "ipc"] })
  const waiting = new Map<string, Array<{ resolve: (m: any) => void; reject: (e: Error) => void }>>()
  const queued = new Map<string, Array<any>>()
  const client: Client = { child, next: undefined!, progress: 0 }
  child.on("message", (m: any) => {
    if (m.type === "progress") return void (client.progress = m.ok)
    const w = waiting.get(m.type)?.shift()
    if (w !== undefined) w.resolve(m)
    else queued.set(m.type, [...(queued.get(m.type) ?? []), m])
  })
  child.on("exit", (code) => {
    for (const [type, ws] of waiting) {
      for (const w of ws) w.reject(new Error(`client process exited (${code}) waiting for ${type}`))
    }
    waiting.clear()
  })
  const next = (type: string) =>
    new Promise<any>((resolve, reject) => {
      const q = queued.get(type)?.shift()
      if (q !== undefined) return resolve(q)
      if (child.exitCode !== null) return reject(new Error(`client process exited waiting for ${type}`))
      waiting.set(type, [...(waiting.get(type) ?? []), { resolve, reject }])
    })
  ;(client as { next: Client["next"] }).next = next
  return next("ready").then(() => client)
}

// ---- committing task events like the product does (stream order under the project row's lock) ----

const commitSql = `
  WITH want AS (
    SELECT project_id, count(*)::bigint AS n FROM unnest($1::uuid[]) AS project_id GROUP BY project_id),
  bumped AS (
    UPDATE projects p SET last_seq = p.last_seq + w.n FROM want w WHERE p.project_id = w.project_id
    RETURNING p.project_id, p.tenant_id, p.stream_epoch, p.last_seq, w.n),
  ev AS (
    SELECT gen_random_uuid() AS id, e.task, e.version, e.progress, b.project_id, b.tenant_id, b.stream_epoch,
      b.last_seq - b.n + e.ord AS seq
    FROM unnest($1::uuid[], $2::uuid[], $3::bigint[], $4::int[], $5::int[]) AS e(project, task, version, progress, ord)
    JOIN bumped b ON b.project_id = e.project),
  te AS (
    INSERT INTO task_events (event_id, tenant_id, project_id, task_id, attempt_id, task_version, stream_epoch,
      cursor_seq, event_type, public_payload, source, trace_id)
    SELECT id, tenant_id, project_id, task, NULL, version, stream_epoch, seq, 'task.status.changed',
      jsonb_build_object('task_id', task, 'task_version', version, 'status', 'running', 'stage', 'generating',
        'progress', progress, 'asset_id', NULL, 'error_code', NULL),
      'poll', 'bench-sse'
    FROM ev),
  ob AS (
    -- in cursor order: the relay publishes by id, and the dispatcher drops a task's version below one it published
    INSERT INTO outbox_events (event_id, aggregate_type, aggregate_id, aggregate_version, event_type, payload,
      home_region, write_epoch)
    SELECT id, 'generation_task', task, version, 'task.status.changed',
      jsonb_build_object('event_id', id, 'event_type', 'task.status.changed', 'schema_version', 1,
        'aggregate_id', task, 'aggregate_version', version, 'tenant_id', tenant_id, 'project_id', project_id,
        'user_id', tenant_id, 'attempt_id', NULL, 'cursor', stream_epoch || '-' || seq, 'status', 'running',
        'stage', 'generating', 'progress', progress, 'asset_id', NULL, 'error_code', NULL, 'source', 'poll',
        'home_region', 'local', 'write_epoch', 1, 'occurred_at', now()::text, 'trace_id', 'bench-sse'),
      'local', 1
    FROM ev ORDER BY project_id, seq)
  SELECT project_id, last_seq::int AS last_seq FROM bumped`

const projectIndex = new Map(projects.map((p, i) => [p, i]))
/** next task_version per task (tasks are inserted at version 1) */
const versions = tasks.map((ts) => ts.map(() => 2))
/** an event of the run: project index * 2^24 + cursor sequence */
const key = (p: number, seq: number) => p * 16_777_216 + seq
const projectOfKey = (k: number) => Math.floor(k / 16_777_216)

/** Commits `n` events on random projects in one transaction (one statement); records each one's commit time. */
const commitBatch = async (db: pg.Client, n: number, committedAt: Map<number, number>) => {
  const byProject = new Map<number, Array<{ task: string; version: number }>>()
  for (let i = 0; i < n; i++) {
    const p = Math.floor(Math.random() * PROJECTS)
    const t = Math.floor(Math.random() * TASKS_PER_PROJECT)
    const list = byProject.get(p) ?? []
    list.push({ task: tasks[p]![t]!, version: versions[p]![t]!++ })
    byProject.set(p, list)
  }
  const cols = {
    project: [] as Array<string>,
    task: [] as Array<string>,
    version: [] as Array<number>,
    progress: [] as Array<number>,
    ord: [] as Array<number>
  }
  for (const [p, list] of byProject) {
    list.forEach((e, i) => {
      cols.project.push(projects[p]!)
      cols.task.push(e.task)
      cols.version.push(e.version)
      cols.progress.push(e.version % 101)
      cols.ord.push(i + 1)
    })
  }
  const result = await db.query<{ project_id: string; last_seq: number }>(
    commitSql,
    [cols.project, cols.task, cols.version, cols.progress, cols.ord]
  )
  const at = Date.now()
  for (const row of result.rows) {
    const p = projectIndex.get(row.project_id)!
    const count = byProject.get(p)!.length
    for (let s = row.last_seq - count + 1; s <= row.last_seq; s++) committedAt.set(key(p, s), at)
  }
}

/** Commits at `rate` events/s for `seconds`, in 20 ms ticks. */
const drive = async (db: pg.Client, rate: number, seconds: number, committedAt: Map<number, number>) => {
  const started = performance.now()
  let sent = 0
  while (performance.now() - started < seconds * 1000) {
    const due = Math.floor(((performance.now() - started) / 1000) * rate) - sent
    if (due > 0) {
      const n = Math.min(due, 500)
      await commitBatch(db, n, committedAt)
      sent += n
    } else {
      await sleep(20)
    }
  }
  return sent
}

/**
 * The runner's responsiveness: an unauthenticated stream request (answered 401 by the gateway without touching the
 * database) every 250 ms; its round trip is mostly the runner's event-loop delay.
 */
const responsiveness = (port: number) => {
  let samples: Array<number> = []
  let running = true
  const url = `http://127.0.0.1:${port}/v1/projects/${crypto.randomUUID()}/events`
  void (async () => {
    while (running) {
      const t = performance.now()
      try {
        await (await fetch(url, { signal: AbortSignal.timeout(30_000) })).arrayBuffer()
        samples.push(performance.now() - t)
      } catch {
        samples.push(30_000)
      }
      await sleep(250)
    }
  })()
  return {
    take: () => {
      const s = samples
      samples = []
      return s
    },
    stop: () => (running = false)
  }
}

// ---- the run ----

const kib = (x: number) => x.toFixed(1)
const mib = (x: number) => (x / 1024).toFixed(0)
const ms = (xs: ReadonlyArray<number>, p: number) => xs.length === 0 ? "n/a" : percentile(xs, p).toFixed(0)
const max = (xs: ReadonlyArray<number>) => xs.length === 0 ? "n/a" : xs.reduce((a, b) => Math.max(a, b)).toFixed(0)
const orNa = (x: number | null) => x === null ? "n/a" : String(x)

const main = async () => {
  const runStarted = performance.now()
  console.log(
    `fd limit: soft ${SOFT_FDS}, hard ${HARD_FDS}; ${M} SSE streams over ${PROJECTS} projects (fan-out ${FANOUT}), ` +
      `${CLIENTS} client processes, ${SLOW} slow clients; ${RATE} events/s for ${SECONDS} s` +
      (RATE2 > 0 ? `, then ${RATE2} events/s` : "")
  )
  if (GOAL_CONNECTIONS + RUNNER_SPARE_FDS > HARD_FDS) {
    console.log(
      `note: the goal of ${GOAL_CONNECTIONS} streams cannot be reached on this machine: each stream is one fd in the ` +
        `runner, whose hard fd limit is ${HARD_FDS} (raising it needs CAP_SYS_RESOURCE, which this container ` +
        `lacks), and the runner needs ~${RUNNER_SPARE_FDS} more for its pool, Redis and the slow clients`
    )
  }
  if (M + SLOW + 100 > SOFT_FDS) console.log(`warning: ${M} streams do not fit the runner's ${SOFT_FDS} fds`)

  delete process.env.ROCKETMQ_ENDPOINTS // the in-process queue
  const admin = new pg.Client({ connectionString: adminUrl })
  await admin.connect()
  await admin.query(`CREATE DATABASE ${dbName}`)
  const url = new URL(adminUrl)
  url.pathname = `/${dbName}`
  const db = new pg.Client({ connectionString: url.toString() })
  let runner: ChildProcess | undefined
  const clients: Array<Client> = []
  const redisConnections: Array<Redis> = []
  let stopProbe = () => {}

  let cleaned: Promise<void> | undefined
  const cleanup = () =>
    cleaned ??= (async () => {
      stopProbe()
      for (const r of redisConnections) r.disconnect()
      for (const c of clients) if (c.child.connected) c.child.send({ type: "exit" })
      await Promise.all(clients.map((c) => stopProcess(c.child, "SIGTERM")))
      if (runner !== undefined) await stopProcess(runner, "SIGTERM")
      for (const pid of ownRunnerPids()) process.kill(pid, "SIGKILL")
      await db.end().catch(() => undefined)
      await admin.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`).catch((e) => console.error(e))
      await admin.end().catch(() => undefined)
      fs.rmSync(probeFile, { force: true })
      const redis = new Redis(redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1 })
      try {
        await redis.connect()
        const keys = await redis.keys(`${prefix}*`)
        if (keys.length > 0) await redis.del(...keys)
      } catch {
        // the run's Redis keys are only litter
      } finally {
        redis.disconnect()
      }
    })()
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    process.once(signal, () => void cleanup().finally(() => process.exit(130)))
  }

  try {
    const started = await Promise.race([
      startRunnerProcess({
        DATABASE_URL: url.toString(),
        REDIS_URL: redisUrl,
        REDIS_KEY_PREFIX: prefix,
        INBOX_PROCESSOR_ENABLED: "false",
        AUTH_SECRET,
        STREAMS_PER_USER: "100000",
        STREAMS_PER_TENANT: "100000",
        STREAM_OPENS_PER_SECOND: "100000",
        STREAM_OPENS_BURST: "100000",
        MEMORY_PROBE_FILE: probeFile,
        ...RUNNER_ENV
      }, { nodeArgs: [...NODE_ARGS, "--expose-gc", "--import", "./bench/memoryProbe.mjs"] }),
      sleep(120_000).then(() => undefined)
    ])
    if (started === undefined) {
      // what the runner is waiting for: its database sessions and its sockets
      const sessions = await admin.query(
        `SELECT pid, state, wait_event_type, wait_event, now() - query_start AS running, left(query, 160) AS query
         FROM pg_stat_activity WHERE datname = $1`,
        [dbName]
      )
      console.log(`runner sessions in ${dbName}:`, sessions.rows)
      for (const pid of ownRunnerPids()) {
        console.log(
          `runner ${pid} sockets:\n` + execFileSync("ss", ["-tanp"], { encoding: "utf8" }).split("\n")
            .filter((l) => l.includes(`pid=${pid},`)).join("\n")
        )
      }
      throw new Error("the runner did not answer GET /openapi.json within 120 s")
    }
    runner = started.child
    const pid = runner.pid!
    const port = started.httpPort
    await db.connect()

    // projects (as a stream's first open or a task admission creates them), their tasks, and the slow clients' history
    const created = await db.query<{ project_id: string; stream_epoch: string }>(
      `INSERT INTO projects (project_id, tenant_id, stream_epoch)
       SELECT p, $2, (extract(epoch FROM clock_timestamp()) * 1000)::bigint FROM unnest($1::uuid[]) p
       RETURNING project_id, stream_epoch`,
      [[...projects, historyProject], tenant]
    )
    const historyEpoch = Number(created.rows.find((r) => r.project_id === historyProject)!.stream_epoch)
    await db.query(
      `INSERT INTO generation_tasks (id, tenant_id, project_id, user_id, idempotency_key, request_hash, request,
         status, stage, progress, version, last_seq, current_attempt_id, home_region, write_epoch)
       SELECT t.id, $3, t.project, $3, t.id::text, 'bench-sse', '{}'::jsonb, 'running', 'generating', 0, 1, 0, NULL,
         'local', 1
       FROM unnest($1::uuid[], $2::uuid[]) AS t(id, project)`,
      [
        [...tasks.flat(), historyTask],
        [...projects.flatMap((p) => Array.from({ length: TASKS_PER_PROJECT }, () => p)), historyProject],
        tenant
      ]
    )
    await db.query(
      `WITH ev AS (
         INSERT INTO task_events (event_id, tenant_id, project_id, task_id, attempt_id, task_version, stream_epoch,
           cursor_seq, event_type, public_payload, source, trace_id)
         SELECT gen_random_uuid(), $1, $2, $3, NULL, s + 1, $4, s, 'task.status.changed',
           jsonb_build_object('task_id', $3::uuid, 'task_version', s + 1, 'status', 'running', 'stage', 'generating',
             'progress', s % 101, 'asset_id', repeat('a', $6::int), 'error_code', NULL),
           'poll', 'bench-sse'
         FROM generate_series(1, $5::int) s RETURNING 1)
       UPDATE projects SET last_seq = (SELECT count(*) FROM ev) WHERE project_id = $2`,
      [tenant, historyProject, historyTask, historyEpoch, HISTORY, HISTORY_FILLER]
    )
    console.log(
      `setup: runner pid ${pid} (node flags: ${NODE_ARGS.join(" ") || "none"}) up with ${PROJECTS + 1} projects in ` +
        `${((performance.now() - runStarted) / 1000).toFixed(1)} s`
    )

    // one user per client process, as the connection limits count per user
    const signingKey = new TextEncoder().encode(AUTH_SECRET)
    const tokens = await Promise.all(
      Array.from({ length: CLIENTS }, () =>
        new jose.SignJWT({ tenant_id: tenant, projects: "*" })
          .setProtectedHeader({ alg: "HS256", typ: TokenKinds.access.typ })
          .setSubject(crypto.randomUUID())
          .setIssuer(ISSUER)
          .setAudience(TokenKinds.access.audience)
          .setIssuedAt()
          .setExpirationTime("1h")
          .sign(signingKey))
    )
    clients.push(...await Promise.all(Array.from({ length: CLIENTS }, startClient)))
    const clientPids = clients.map((c) => c.child.pid!)
    const probeLoop = responsiveness(port)
    stopProbe = probeLoop.stop

    // ---- 1. open M streams ----
    await sleep(1000)
    const before = await probe(pid)
    const fdsBefore = fdCount(pid)
    probeLoop.take()
    const openCpu0 = cpuSeconds(pid)
    const openStarted = performance.now()
    const targets = clients.map(() => [] as Array<number>)
    for (let j = 0; j < M; j++) targets[j % CLIENTS]!.push(j % PROJECTS)
    clients.forEach((c, i) =>
      c.child.send({
        type: "open",
        group: "normal",
        host: "127.0.0.1",
        port,
        localAddress: `127.1.${runByte}.${i + 1}`,
        token: tokens[i],
        projects,
        targets: targets[i],
        slow: false,
        concurrency: OPEN_CONCURRENCY
      })
    )
    // the open rate over the first and the last quarter of the streams: does an open cost more as they add up?
    const quarterAt: Array<number> = []
    const watcher = setInterval(() => {
      const n = clients.reduce((s, c) => s + c.progress, 0)
      while (quarterAt.length < 3 && n >= ((quarterAt.length + 1) * M) / 4) quarterAt.push(performance.now())
    }, 100)
    const opened = await Promise.all(clients.map((c) => c.next("opened")))
    clearInterval(watcher)
    quarterAt.push(performance.now())
    const openSeconds = (performance.now() - openStarted) / 1000
    const openCpu = (cpuSeconds(pid) - openCpu0) / openSeconds * 100
    const openProbe = probeLoop.take()
    const ok = opened.reduce((n, o) => n + o.ok, 0)
    const errors: Record<string, number> = {}
    for (const o of opened) for (const [k, v] of Object.entries(o.errors)) errors[k] = (errors[k] ?? 0) + (v as number)
    // streams per project: what each event of the project should reach
    const fan = new Array<number>(PROJECTS).fill(0)
    for (let j = 0; j < M; j++) fan[j % PROJECTS]!++
    for (const o of opened) for (const p of o.failedTargets as Array<number>) fan[p]!--
    await sleep(2000)
    const idle = await probe(pid)
    const fdsIdle = fdCount(pid)
    await sleep(1000)
    probeLoop.take() // not the forced GC's pause
    const idleCpu0 = cpuSeconds(pid)
    const idleT0 = performance.now()
    await sleep(2000)
    const idleCpu = (cpuSeconds(pid) - idleCpu0) / ((performance.now() - idleT0) / 1000) * 100
    const idleProbe = probeLoop.take()

    const quarterRate = (a: number, b: number) => (M / 4 / ((b - a) / 1000)).toFixed(0)
    console.log(`\n== bench:sse: one runner process, SSE via Redis Pub/Sub and the in-process queue ==`)
    console.log(
      `opened ${ok}/${M} streams (${PROJECTS} projects, fan-out ${FANOUT}) in ${openSeconds.toFixed(1)} s: ` +
        `${(ok / openSeconds).toFixed(0)}/s` +
        (quarterAt.length === 4
          ? ` (first quarter, each the first of its project: ${quarterRate(openStarted, quarterAt[0]!)}/s; last ${
            quarterRate(quarterAt[2]!, quarterAt[3]!)
          }/s)`
          : "") +
        `, runner CPU ${openCpu.toFixed(0)} %, responsiveness p99 ${ms(openProbe, 99)} ms (max ${max(openProbe)}); ` +
        `failures: ${Object.keys(errors).length === 0 ? "none" : JSON.stringify(errors)}; runner fds ${fdsBefore} → ` +
        fdsIdle
    )
    const idlePerConnection = (idle.rssKiB - before.rssKiB) / ok
    console.log(
      `idle, after a full GC: RSS ${mib(before.rssKiB)} → ${mib(idle.rssKiB)} MiB = ${kib(idlePerConnection)} KiB ` +
        `per stream (goal ≤ 12); live heap ${mib(before.heapKiB)} → ${mib(idle.heapKiB)} MiB = ${
          kib((idle.heapKiB - before.heapKiB) / ok)
        } KiB per stream; runner CPU ${idleCpu.toFixed(1)} %, responsiveness p99 ${ms(idleProbe, 99)} ms`
    )

    // ---- 2. slow clients: resume from cursor 0 of a long history, never read ----
    clients[0]!.child.send({
      type: "open",
      group: "slow",
      host: "127.0.0.1",
      port,
      localAddress: `127.1.${runByte}.250`,
      token: tokens[0],
      projects: [historyProject],
      targets: Array.from({ length: SLOW }, () => 0),
      slow: true,
      lastEventId: `${historyEpoch}-0`,
      concurrency: SLOW
    })
    const slowOpened = await clients[0]!.next("opened")
    const slowOpenedAt = performance.now()
    await sleep(1000)

    // ---- 3. load ----
    // a Redis subscriber of every project channel splits the latency: commit → Redis, Redis → client
    const busAt = new Map<number, number>()
    const subscriber = new Redis(redisUrl)
    redisConnections.push(subscriber)
    await subscriber.psubscribe(`${prefix}project:*`)
    subscriber.on("pmessage", (_pattern: string, channel: string, message: string) => {
      const at = Date.now()
      const p = projectIndex.get(channel.slice(channel.lastIndexOf(":") + 1))
      const cursor = (JSON.parse(message) as { cursor: string }).cursor
      if (p !== undefined) busAt.set(key(p, Number(cursor.slice(cursor.indexOf("-") + 1))), at)
    })
    for (const c of clients) c.child.send({ type: "record", on: true })
    const arrivals: Array<number> = []
    /** collects what the clients received so far; their gap/duplicate/close counters since they started */
    const collect = async () => {
      const totals = { gaps: 0, duplicates: 0, unexpectedCloses: 0 }
      for (const c of clients) c.child.send({ type: "collect" })
      for (const r of await Promise.all(clients.map((c) => c.next("arrivals")))) {
        for (let i = 0; i < r.arrivals.length; i++) arrivals.push(r.arrivals[i])
        totals.gaps += r.gaps
        totals.duplicates += r.duplicates
        totals.unexpectedCloses += r.unexpectedCloses
      }
      return totals
    }

    const phase = async (rate: number) => {
      await drive(db, rate, WARMUP_SECONDS, new Map())
      const base = await collect()
      arrivals.length = 0
      probeLoop.take()
      const committedAt = new Map<number, number>()
      const rss: Array<number> = []
      const sampler = setInterval(() => rss.push(rssKiB(pid)), 1000)
      const cpu0 = cpuSeconds(pid)
      const clientCpu0 = clientPids.reduce((n, p) => n + cpuSeconds(p), 0)
      const t = performance.now()
      const phaseStart = new Date()
      const sent = await drive(db, rate, SECONDS, committedAt)
      const wall = (performance.now() - t) / 1000
      const phaseEnd = new Date()
      const cpu = (cpuSeconds(pid) - cpu0) / wall * 100
      const clientCpu = (clientPids.reduce((n, p) => n + cpuSeconds(p), 0) - clientCpu0) / wall * 100
      clearInterval(sampler)
      const loadProbe = probeLoop.take()
      const fromBus = [...committedAt.keys()].filter((k) => busAt.has(k)).length
      // every delivery of the phase's events; stragglers are waited for (up to STRAGGLERS_MS)
      let expected = 0
      for (const k of committedAt.keys()) expected += fan[projectOfKey(k)]!
      let latencies: Array<number> = []
      let end = base
      for (let waited = 0; waited < STRAGGLERS_MS; waited += 1000) {
        await sleep(1000)
        end = await collect()
        latencies = []
        for (let i = 0; i < arrivals.length; i += 3) {
          const at = committedAt.get(key(arrivals[i]!, arrivals[i + 1]!))
          if (at !== undefined) latencies.push(arrivals[i + 2]! - at)
        }
        if (latencies.length >= expected && [...committedAt.keys()].every((k) => busAt.has(k))) break
      }
      // the last hop, Redis → client, for deliveries that came by the bus; the others came from the feeds' tail of
      // PostgreSQL, before (or without) the bus bringing the event
      const busToClient: Array<number> = []
      let fromTail = 0
      for (let i = 0; i < arrivals.length; i += 3) {
        const k = key(arrivals[i]!, arrivals[i + 1]!)
        if (!committedAt.has(k)) continue
        const b = busAt.get(k)
        if (b !== undefined && arrivals[i + 2]! >= b) busToClient.push(arrivals[i + 2]! - b)
        else fromTail++
      }
      arrivals.length = 0
      const toBus: Array<number> = []
      for (const [k, at] of committedAt) {
        const b = busAt.get(k)
        if (b !== undefined) toBus.push(b - at)
      }
      busAt.clear()
      // the first hop: commit → the outbox relay handed the row to the queue (published_at − the row's now())
      const relay = (await db.query<{ p50: number | null; p99: number | null; unpublished: number }>(
        `SELECT (percentile_cont(0.5) WITHIN GROUP (ORDER BY ms))::int AS p50,
           (percentile_cont(0.99) WITHIN GROUP (ORDER BY ms))::int AS p99,
           count(*) FILTER (WHERE ms IS NULL)::int AS unpublished
         FROM (SELECT extract(epoch FROM published_at - created_at) * 1000 AS ms FROM outbox_events
               WHERE created_at BETWEEN $1 AND $2) o`,
        [phaseStart, phaseEnd]
      )).rows[0]!
      const rssLoad = percentile(rss, 50)
      const result = {
        rate,
        p50: percentile(latencies, 50),
        p99: percentile(latencies, 99),
        delivered: latencies.length,
        expected,
        rssPerConnection: (rssLoad - before.rssKiB) / ok
      }
      console.log(
        `at ${rate} events/s for ${wall.toFixed(1)} s (${sent} events committed): delivered ${latencies.length}/` +
          `${expected} within ${STRAGGLERS_MS / 1000} s of the end (${
            (latencies.length / wall).toFixed(0)
          }/s); commit → client p50 ${ms(latencies, 50)} ms, p99 ${ms(latencies, 99)} ms, max ${max(latencies)} ms` +
          (rate === 1000 ? " (goal p99 ≤ 100)" : "")
      )
      console.log(
        `  hops: commit → outbox relay p50 ${orNa(relay.p50)} ms, p99 ${
          orNa(relay.p99)
        } ms (${relay.unpublished} still ` +
          `unpublished); commit → Redis p50 ${ms(toBus, 50)} ms, p99 ${ms(toBus, 99)} ms (${toBus.length}/${sent} ` +
          `events; ${(fromBus / wall).toFixed(0)}/s reached Redis during the phase); Redis → client p50 ${
            ms(busToClient, 50)
          } ms, p99 ${
            ms(busToClient, 99)
          } ms (${busToClient.length} deliveries; ${fromTail} came from the PostgreSQL ` +
          `tail before the bus had them)`
      )
      console.log(
        `  runner CPU ${cpu.toFixed(0)} % of a core (clients ${clientCpu.toFixed(0)} %), responsiveness p50 ` +
          `${ms(loadProbe, 50)} ms, p99 ${ms(loadProbe, 99)} ms, max ${max(loadProbe)} ms; RSS median ${
            mib(rssLoad)
          } MiB (max ${mib(Math.max(...rss))}) = ${kib(result.rssPerConnection)} KiB per stream; per-stream gaps ${
            end.gaps - base.gaps
          }, duplicates ${end.duplicates - base.duplicates}, streams closed by the runner ${
            end.unexpectedCloses - base.unexpectedCloses
          }`
      )
      return result
    }

    const runnerState = () =>
      runner!.exitCode !== null || runner!.signalCode !== null
        ? `the runner EXITED (${runner!.exitCode ?? runner!.signalCode})`
        : `the runner is alive`
    const results = [await phase(RATE)]
    if (RATE2 > 0) results.push(await phase(RATE2))
    console.log(`  after the load: ${runnerState()}, ${fdCount(pid)} fds`)

    // ---- 4. the slow clients read again: the runner's cut-offs show as an end of stream ----
    if (SLOW > 0) await sleep(Math.max(0, slowOpenedAt + SLOW_WAIT_MS - performance.now()))
    clients[0]!.child.send({ type: "resumeSlow", waitMs: 3000 })
    const slow = await clients[0]!.next("slowResult")
    console.log(
      `slow clients (cursor 0 of a ${
        (HISTORY * (HISTORY_FILLER + 200) / 1048576).toFixed(1)
      } MiB history, never read; ${slowOpened.ok}/${SLOW} opened): ${slow.ended}/${slow.total} had been ` +
        `disconnected by the runner ${((performance.now() - slowOpenedAt) / 1000).toFixed(0)} s after opening ` +
        `(they then read the ${mib(slow.bytes / 1024)} MiB left in the kernel buffers)`
    )

    // ---- 5. every stream closed at once (the client processes exit), as after a network blip ----
    probeLoop.take()
    const closeCpu0 = cpuSeconds(pid)
    const closeStarted = performance.now()
    for (const c of clients) c.child.send({ type: "exit" })
    while (fdCount(pid) > fdsBefore + 20 && performance.now() - closeStarted < 60_000) await sleep(100)
    const closeSeconds = (performance.now() - closeStarted) / 1000
    await sleep(2000)
    const closeProbe = probeLoop.take()
    const closeCpu = cpuSeconds(pid) - closeCpu0
    console.log(
      `all ${ok} streams closed at once: the runner's fds were back to ${fdCount(pid)} after ${
        closeSeconds.toFixed(1)
      } s; ${closeCpu.toFixed(1)} s of runner CPU; responsiveness max ${max(closeProbe)} ms`
    )

    const first = results[0]!
    console.log(
      `\nsummary: ${ok} streams open (goal ≥ ${GOAL_CONNECTIONS}; impossible here, hard fd limit ${HARD_FDS}); ` +
        `${kib(idlePerConnection)} KiB RSS per idle stream (goal ≤ 12), ${kib(first.rssPerConnection)} under load; ` +
        results.map((r) =>
          `at ${r.rate} events/s commit → client p50 ${r.p50.toFixed(0)} ms, p99 ${r.p99.toFixed(0)} ms ` +
          `(${r.delivered}/${r.expected} delivered)`
        ).join("; ") +
        ` (goal p99 ≤ 100 ms at 1,000/s); slow-client disconnects ${slow.ended}/${slow.total}; ` +
        `run took ${((performance.now() - runStarted) / 1000).toFixed(0)} s`
    )
  } finally {
    await cleanup()
  }
}

main().then(() => process.exit(0), (e) => {
  console.error(e)
  process.exit(1)
})
