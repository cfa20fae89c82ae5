/**
 * npm run bench:sse — M concurrent Server-Sent Events streams while K events/s are committed, in up to four scenarios (one
 * after the other, each on a fresh database; BENCH_GATEWAYS picks them):
 *   - `ceiling`: the streams go to bench/sseCeiling.mjs, a bare node:http SSE server on one Redis subscriber (no auth,
 *     replay, limits or buffers), while one runner only propagates: what delivery costs with nothing of ours;
 *   - `1`: one runner (`npm start`'s program) serves the streams;
 *   - `2`: two runners on the same database; the client processes spread over their two ports, each project's
 *     streams on one of them, as `npm run cluster`'s nginx routes them (src/cli/cluster/nginx.ts);
 *   - `split`: the production split (README, "Production"): a gateway-only process (RUNNER_ROLES=gateway) serves the
 *     streams while a runner with every other role propagates, the same work on the same two sides as `ceiling`: the
 *     ratio to the ceiling is then the gateway's own cost, with nothing else on its event loop.
 * The path: commit → outbox relay → in-process queue → notification dispatcher → Redis → project feed → every SSE
 * client of the project (and, for whatever the bus did not bring within a tick, the feeds' tail of PostgreSQL). The
 * clients are raw TCP sockets in several plain Node child processes (bench/sseClients.mjs, each with its own
 * file-descriptor budget and loopback source address); they stamp every `id:` line with Date.now() when it arrives.
 *   1. open M streams over M / BENCH_FANOUT projects: opens/s (and for the first quarter, each the first of its
 *      project, and the last), server CPU per open; the servers' RSS and live heap after a full GC, before and after:
 *      per idle stream (BENCH_HEAP_SNAPSHOTS=1 with BENCH_NODE_ARGS=--heapsnapshot-signal=SIGUSR1 writes snapshots);
 *   2. BENCH_SLOW clients resume from cursor 0 of a project whose history is larger than the kernel's socket
 *      buffers (~4 MiB on loopback) and never read: the runner must cut them off (write deadline, 10 s);
 *   3. BENCH_RATE events/s for BENCH_SECONDS after a 3 s warm-up, committed by this process (one transaction per
 *      20 ms tick, stream order under the project rows' locks, as the product commits), spread uniformly over the
 *      projects: commit → client latency p50/p99/max, delivered vs expected, gaps, RSS per stream and CPU; split by a
 *      Redis subscriber here (commit → Redis, Redis → client: the gateway's own hop) and the outbox rows (commit →
 *      relay); the servers' responsiveness (a request every 250 ms); optionally again at BENCH_RATE2;
 *   4. the slow clients read again: those the runner had disconnected see the end of their stream;
 *   5. every stream is closed at once (the client processes exit): how long the servers take to let them go.
 * Each scenario prints the runners' event-loop lag p99 and "Shard lock storage is unhealthy" counts; the summary puts
 * the gateway scenarios beside the ceiling as ratios. Goals (issue #14): ≤ 12 KiB RSS per idle stream; at 5,000
 * streams and 200 events/s commit → client p99 ≤ 50 ms and Redis → client p99 ≤ 10 ms; at 19,500 streams and 1,000
 * events/s commit → client p99 ≤ 250 ms; ≥ 1,000 opens/s; an open ≤ 2 ms of CPU. This process raises its soft fd
 * limit to the hard one (children inherit it); a server needs one fd per stream, so M is bounded by the hard limit
 * (`ulimit -Hn`), which only a privileged process can raise.
 *
 *   BENCH_CONNECTIONS (19500, at most the hard fd limit − 500)  BENCH_RATE (1000)  BENCH_SECONDS (20)
 *   BENCH_RATE2 (0 = no second phase; e.g. 500)  BENCH_FANOUT (4 streams per project)  BENCH_CLIENTS (4 processes)
 *   BENCH_SLOW (10)  BENCH_GATEWAYS ("ceiling,1,2"; or with "split")  BENCH_NODE_ARGS (node flags for the runners)
 *   BENCH_RUNNER_ENV ("NAME=value ..." for the runners)  DATABASE_URL (admin URL)  REDIS_URL
 * A short run: BENCH_CONNECTIONS=5000 BENCH_RATE=200 BENCH_SECONDS=10 BENCH_SLOW=0 npm run bench:sse
 */
import { Redis } from "ioredis"
import * as jose from "jose"
import { type ChildProcess, execFileSync, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import pg from "pg"
import { ISSUER, TokenKinds } from "../src/http/Auth.js"
import { ROLES } from "../src/runners/Roles.js"
import { busHops, key, projectOfKey } from "./sseHops.js"
import {
  type Client,
  cpuSeconds,
  fdCount,
  kib,
  max,
  mib,
  ms,
  orNa,
  ownRunnerPids,
  probe,
  responsiveness,
  rssKiB,
  startCeiling,
  startClient,
  timeWaitSockets
} from "./sseSupport.js"
import { healthLine, percentile, type RunnerHealth, sleep, startRunnerProcess, stopProcess } from "./support.js"

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

const GOAL_CONNECTIONS = 19_500
/** what the runner needs besides streams: database pool, Redis, listeners, the slow clients, files */
const RUNNER_SPARE_FDS = 500
const M = Number(process.env.BENCH_CONNECTIONS ?? Math.min(19_500, SOFT_FDS - RUNNER_SPARE_FDS))
const RATE = Number(process.env.BENCH_RATE ?? 1000)
const RATE2 = Number(process.env.BENCH_RATE2 ?? 0)
const SECONDS = Number(process.env.BENCH_SECONDS ?? 20)
const FANOUT = Number(process.env.BENCH_FANOUT ?? 4)
const CLIENTS = Number(process.env.BENCH_CLIENTS ?? 4)
const SLOW_CLIENTS = Number(process.env.BENCH_SLOW ?? 10)
type Kind = "ceiling" | "split" | number
/**
 * which servers the streams go to, one scenario each: the ceiling server, 1 gateway process, 2 gateway processes, a
 * gateway-only process beside a propagating runner
 */
const KINDS: Array<Kind> = (process.env.BENCH_GATEWAYS ?? "ceiling,1,2").split(",").map((k) => k.trim()).map((k) =>
  k === "ceiling" || k === "split" ? k : Number(k)
)
/** The roles of the runner beside a gateway-only process (`split`): all but the gateway. */
const PROPAGATING_ROLES = ROLES.filter((r) => r !== "gateway").join(",")
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
const DB_BASE = `bench_sse_${suffix}`
const PREFIX_BASE = `bench-sse-${suffix}:`
const AUTH_SECRET = `bench-sse-secret-${crypto.randomUUID()}`
const tenant = crypto.randomUUID()
const projects: Array<string> = Array.from({ length: PROJECTS }, () => crypto.randomUUID())
const tasks = projects.map(() => Array.from({ length: TASKS_PER_PROJECT }, () => crypto.randomUUID()))
const historyProject = crypto.randomUUID()
const historyTask = crypto.randomUUID()
/** a memory probe file per server process: `${probeBase}-<n>.json` */
const probeBase = path.join(os.tmpdir(), `bench-sse-memory-${process.pid}`)
/** one loopback source address per client process (this run's own /24: no TIME_WAIT of an earlier run in the way) */
const runByte = 1 + Math.floor(Math.random() * 254)

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

// ---- the run ----

/** What one scenario measured, for the comparison at the end. */
interface Summary {
  readonly label: string
  readonly opened: number
  readonly opensPerSecond: number
  readonly lastQuarterOpensPerSecond: number
  readonly openCpuMsPerStream: number
  readonly idleKiB: number
  readonly heapKiB: number
  readonly results: Array<{ rate: number; p50: number; p99: number; busP50: number; busP99: number }>
  readonly health: string
}

/**
 * One scenario on a fresh database: streams served by `kind` gateway processes (runners), or by the ceiling server
 * (bench/sseCeiling.mjs) while one runner only propagates.
 */
const scenario = async (kind: Kind): Promise<Summary> => {
  const runStarted = performance.now()
  const label = typeof kind === "string" ? kind : `${kind}gw`
  const dbName = `${DB_BASE}_${label}`
  const prefix = `${PREFIX_BASE}${label}:`
  const servers = kind === "ceiling"
    ? "the ceiling server (bare node:http + one Redis subscriber)"
    : kind === "split"
    ? "a gateway-only process (RUNNER_ROLES=gateway) beside a runner with every other role"
    : kind === 1
    ? "one gateway process"
    : `${kind} gateway processes (runners on one database; a project's streams on one of their ports)`
  const SLOW = kind === "ceiling" ? 0 : SLOW_CLIENTS
  console.log(`\n== bench:sse: ${servers}, SSE via Redis Pub/Sub and the in-process queue ==`)
  delete process.env.ROCKETMQ_ENDPOINTS // the in-process queue
  const admin = new pg.Client({ connectionString: adminUrl })
  await admin.connect()
  await admin.query(`CREATE DATABASE ${dbName}`)
  const url = new URL(adminUrl)
  url.pathname = `/${dbName}`
  const db = new pg.Client({ connectionString: url.toString() })
  const runners: Array<ChildProcess> = []
  let ceiling: ChildProcess | undefined
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
      if (ceiling !== undefined) await stopProcess(ceiling, "SIGTERM")
      await Promise.all(runners.map((r) => stopProcess(r, "SIGTERM")))
      for (const pid of ownRunnerPids()) process.kill(pid, "SIGKILL")
      await db.end().catch(() => undefined)
      await admin.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`).catch((e) => console.error(e))
      await admin.end().catch(() => undefined)
      for (const g of [0, 1, 2]) fs.rmSync(`${probeBase}-${g}.json`, { force: true })
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
    const runnerEnv = (n: number) => ({
      DATABASE_URL: url.toString(),
      REDIS_URL: redisUrl,
      REDIS_KEY_PREFIX: prefix,
      INBOX_PROCESSOR_ENABLED: "false",
      AUTH_SECRET,
      STREAMS_PER_USER: "100000",
      STREAMS_PER_TENANT: "100000",
      STREAM_OPENS_PER_SECOND: "100000",
      STREAM_OPENS_BURST: "100000",
      MEMORY_PROBE_FILE: `${probeBase}-${n}.json`,
      ...RUNNER_ENV
    })
    const startRunner = (n: number, roles?: string) =>
      Promise.race([
        startRunnerProcess(roles === undefined ? runnerEnv(n) : { ...runnerEnv(n), RUNNER_ROLES: roles }, {
          nodeArgs: [...NODE_ARGS, "--expose-gc", "--import", "./bench/memoryProbe.mjs"],
          // a process without the api role has no /openapi.json
          ...(roles === undefined || roles.split(",").includes("api") ? {} : { readyPath: "/readyz" })
        }),
        sleep(120_000).then(() => undefined)
      ])
    const started = await startRunner(0, kind === "split" ? PROPAGATING_ROLES : undefined)
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
    const healths: Array<RunnerHealth> = []
    /** a started runner, watched; what the streams need of it if it serves them: pid, port and memory probe file */
    const keep = (r: NonNullable<typeof started>, n: number) => {
      runners.push(r.child)
      healths.push(r.health)
      return { pid: r.child.pid!, port: r.httpPort, probeFile: `${probeBase}-${n}.json` }
    }
    /** the processes that serve the streams */
    const gateways = [keep(started, 0)]
    if (kind === "split") {
      const gateway = await startRunner(1, "gateway")
      if (gateway === undefined) throw new Error("the gateway-only process did not answer within 120 s")
      gateways.splice(0, 1, keep(gateway, 1))
    }
    for (let n = 1; typeof kind === "number" && n < kind; n++) {
      const another = await startRunner(n)
      if (another === undefined) throw new Error(`gateway process ${n + 1} did not answer within 120 s`)
      gateways.push(keep(another, n))
    }
    if (kind === "ceiling") {
      const bare = await startCeiling({
        REDIS_URL: redisUrl,
        REDIS_KEY_PREFIX: prefix,
        MEMORY_PROBE_FILE: `${probeBase}-2.json`
      })
      ceiling = bare.child
      gateways.splice(0, 1, { pid: bare.child.pid!, port: bare.port, probeFile: `${probeBase}-2.json` })
    }
    const ports = gateways.map((g) => g.port)
    const runner = runners[0]!
    const sum = (f: (pid: number) => number) => gateways.reduce((n, g) => n + f(g.pid), 0)
    /** every gateway's heap and RSS, summed */
    const probeAll = async () => {
      const each = await Promise.all(gateways.map((g) => probe(g.pid, g.probeFile)))
      return { heapKiB: each.reduce((n, p) => n + p.heapKiB, 0), rssKiB: each.reduce((n, p) => n + p.rssKiB, 0) }
    }
    await db.connect()

    // projects (as a stream's first open or a task admission creates them), their tasks, and the slow clients' history
    const created = await db.query<{ project_id: string; stream_epoch: string }>(
      `INSERT INTO projects (project_id, tenant_id, stream_epoch)
       SELECT p, $2, (extract(epoch FROM clock_timestamp()) * 1000)::bigint FROM unnest($1::uuid[]) p
       RETURNING project_id, stream_epoch`,
      [[...projects, historyProject], tenant]
    )
    const historyEpoch = Number(created.rows.find((r) => r.project_id === historyProject)!.stream_epoch)
    // finished tasks: they only own the events this bench writes. Live ones without an attempt (as they were) were
    // woken by the runner's ResumeOnAcquire when it took their shard after this insert, and their entities then
    // waited in memory for good (no attempt: nothing to do), so the runner held ~2,000 entities or none depending on
    // how many shards it acquired after this moment: 116–130 against 62 MiB before the first stream, 24 against
    // 7.3 KiB of live heap per stream (heap snapshots of both: thousands of fibers, semaphores and latches)
    await db.query(
      `INSERT INTO generation_tasks (id, tenant_id, project_id, user_id, idempotency_key, request_hash, request,
         status, stage, progress, version, last_seq, current_attempt_id, home_region, write_epoch, terminal_at)
       SELECT t.id, $3, t.project, $3, t.id::text, 'bench-sse', '{}'::jsonb, 'ready', 'done', 100, 1, 0, NULL,
         'local', 1, now()
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
      `setup: ${label} pids ${gateways.map((g) => g.pid).join(", ")} (node flags: ${
        NODE_ARGS.join(" ") || "none"
      }) up with ${PROJECTS + 1} projects in ` +
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
    const probeLoop = responsiveness(
      `http://127.0.0.1:${ports[0]}/v1/projects/${crypto.randomUUID()}/events${kind === "ceiling" ? "/none" : ""}`
    )
    stopProbe = probeLoop.stop

    // ---- 1. open M streams ----
    await sleep(1000)
    const before = await probeAll()
    const fdsBefore = sum(fdCount)
    probeLoop.take()
    const openCpu0 = sum(cpuSeconds)
    const openStarted = performance.now()
    const targets = clients.map(() => [] as Array<number>)
    // client i opens its streams on ports[i % ports.length]; a project's streams all go to one port, as the cluster's
    // nginx sends them (a hash of the project id), each to the next of that port's clients
    const clientsOf = ports.map((_, k) => clients.flatMap((_, i) => i % ports.length === k ? [i] : []))
    const turns = ports.map(() => 0)
    for (let j = 0; j < M; j++) {
      const project = j % PROJECTS
      const k = project % ports.length
      targets[clientsOf[k]![turns[k]++ % clientsOf[k]!.length]!]!.push(project)
    }
    clients.forEach((c, i) =>
      c.child.send({
        type: "open",
        group: "normal",
        host: "127.0.0.1",
        port: ports[i % ports.length],
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
    const openCpuSeconds = sum(cpuSeconds) - openCpu0
    const openCpu = openCpuSeconds / openSeconds * 100
    const openProbe = probeLoop.take()
    const ok = opened.reduce((n, o) => n + o.ok, 0)
    const errors: Record<string, number> = {}
    for (const o of opened) for (const [k, v] of Object.entries(o.errors)) errors[k] = (errors[k] ?? 0) + (v as number)
    // streams per project: what each event of the project should reach
    const fan = new Array<number>(PROJECTS).fill(0)
    for (let j = 0; j < M; j++) fan[j % PROJECTS]!++
    for (const o of opened) for (const p of o.failedTargets as Array<number>) fan[p]!--
    await sleep(2000)
    const idle = await probeAll()
    const fdsIdle = sum(fdCount)
    await sleep(1000)
    probeLoop.take() // not the forced GC's pause
    const idleCpu0 = sum(cpuSeconds)
    const idleT0 = performance.now()
    await sleep(2000)
    const idleCpu = (sum(cpuSeconds) - idleCpu0) / ((performance.now() - idleT0) / 1000) * 100
    const idleProbe = probeLoop.take()

    const quarterRate = (a: number, b: number) => (M / 4 / ((b - a) / 1000)).toFixed(0)
    console.log(
      `opened ${ok}/${M} streams (${PROJECTS} projects, fan-out ${FANOUT}) in ${openSeconds.toFixed(1)} s: ` +
        `${(ok / openSeconds).toFixed(0)}/s` +
        (quarterAt.length === 4
          ? ` (first quarter, each the first of its project: ${quarterRate(openStarted, quarterAt[0]!)}/s; last ${
            quarterRate(quarterAt[2]!, quarterAt[3]!)
          }/s)`
          : "") +
        `, server CPU ${openCpu.toFixed(0)} % of a core = ${
          (openCpuSeconds * 1000 / Math.max(1, ok)).toFixed(2)
        } ms per open (everything the servers did meanwhile; goal ≤ 2), responsiveness p99 ${
          ms(openProbe, 99)
        } ms (max ${max(openProbe)}); ` +
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
      port: ports[0],
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
      const sampler = setInterval(() => rss.push(sum(rssKiB)), 1000)
      const cpu0 = sum(cpuSeconds)
      const clientCpu0 = clientPids.reduce((n, p) => n + cpuSeconds(p), 0)
      const t = performance.now()
      const phaseStart = new Date()
      const sent = await drive(db, rate, SECONDS, committedAt)
      const wall = (performance.now() - t) / 1000
      const phaseEnd = new Date()
      const cpu = (sum(cpuSeconds) - cpu0) / wall * 100
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
      const { busToClient, fromTail, inOrderToClient, outOfOrder } = busHops(arrivals, committedAt, busAt)
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
        rssPerConnection: (rssLoad - before.rssKiB) / ok,
        busP50: percentile(busToClient, 50),
        busP99: percentile(busToClient, 99)
      }
      console.log(
        `at ${rate} events/s for ${wall.toFixed(1)} s (${sent} events committed): delivered ${latencies.length}/` +
          `${expected} within ${STRAGGLERS_MS / 1000} s of the end (${
            (latencies.length / wall).toFixed(0)
          }/s); commit → client p50 ${ms(latencies, 50)} ms, p99 ${ms(latencies, 99)} ms, max ${max(latencies)} ms` +
          (rate === 1000 ? " (goal p99 ≤ 250 beside 19,500 streams)" : rate === 200 ? " (goal p99 ≤ 50)" : "")
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
          } ms (goal p99 ≤ 10; ${busToClient.length} deliveries; ${fromTail} came from the PostgreSQL ` +
          `tail before the bus had them)`
      )
      console.log(
        `  of those, ${outOfOrder} (${(outOfOrder / Math.max(1, busToClient.length) * 100).toFixed(1)}%) reached ` +
          `Redis before an earlier event of their project and waited for it (cursor order); from the moment every ` +
          `event of the project up to theirs was in Redis: p50 ${ms(inOrderToClient, 50)} ms, p99 ${
            ms(inOrderToClient, 99)
          } ms`
      )
      console.log(
        `  server CPU ${cpu.toFixed(0)} % of a core (clients ${clientCpu.toFixed(0)} %), responsiveness p50 ` +
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
    console.log(`  after the load: ${runnerState()}, ${sum(fdCount)} fds`)

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
    const closeCpu0 = sum(cpuSeconds)
    const closeStarted = performance.now()
    for (const c of clients) c.child.send({ type: "exit" })
    while (sum(fdCount) > fdsBefore + 20 && performance.now() - closeStarted < 60_000) await sleep(100)
    const closeSeconds = (performance.now() - closeStarted) / 1000
    await sleep(2000)
    const closeProbe = probeLoop.take()
    const closeCpu = sum(cpuSeconds) - closeCpu0
    console.log(
      `all ${ok} streams closed at once: the runner's fds were back to ${sum(fdCount)} after ${
        closeSeconds.toFixed(1)
      } s; ${closeCpu.toFixed(1)} s of runner CPU; responsiveness max ${max(closeProbe)} ms`
    )

    const health = healthLine(healths.map((h) => h.stop()))
    console.log(
      `runners (${
        kind === "ceiling" ? "propagation only" : kind === "split" ? "1: propagation, 2: the gateway" : "the gateways"
      }): ${health}`
    )
    const first = results[0]!
    console.log(
      `${label} summary: ${ok} streams open; ${kib(idlePerConnection)} KiB RSS per idle stream (goal ≤ 12), ${
        kib(first.rssPerConnection)
      } under load; ` +
        results.map((r) =>
          `at ${r.rate} events/s commit → client p50 ${r.p50.toFixed(0)} ms, p99 ${r.p99.toFixed(0)} ms ` +
          `(${r.delivered}/${r.expected} delivered)`
        ).join("; ") +
        `; slow-client disconnects ${slow.ended}/${slow.total}; ` +
        `took ${((performance.now() - runStarted) / 1000).toFixed(0)} s`
    )
    return {
      label,
      opened: ok,
      opensPerSecond: ok / openSeconds,
      lastQuarterOpensPerSecond: quarterAt.length === 4 ? M / 4 / ((quarterAt[3]! - quarterAt[2]!) / 1000) : NaN,
      openCpuMsPerStream: openCpuSeconds * 1000 / Math.max(1, ok),
      idleKiB: idlePerConnection,
      heapKiB: (idle.heapKiB - before.heapKiB) / ok,
      results: results.map((r) => ({ rate: r.rate, p50: r.p50, p99: r.p99, busP50: r.busP50, busP99: r.busP99 })),
      health
    }
  } finally {
    await cleanup()
  }
}

/**
 * Waits (at most 75 s) for the previous scenario's closed streams to leave TIME_WAIT (60 s on Linux). Measured here
 * with 19,500 streams: whichever scenario came second, the ceiling or a gateway, opened its streams about 3× slower
 * (536–622/s against 1,729–1,906/s first; its last quarter 390–406/s) while ~19,500 sockets stood in TIME_WAIT, its
 * servers mostly idle meanwhile (16–40% of a core): the cost was the machine's, not the server's.
 */
const settleTimeWait = async () => {
  const started = performance.now()
  const before = timeWaitSockets()
  while (timeWaitSockets() > 1_000 && performance.now() - started < 75_000) await sleep(1000)
  if (before > 1_000) {
    console.log(
      `waited ${((performance.now() - started) / 1000).toFixed(0)} s for the previous scenario's ${before} sockets ` +
        `in TIME_WAIT to expire (${timeWaitSockets()} left): opens beside them ran ~3× slower`
    )
  }
}

const main = async () => {
  console.log(
    `fd limit: soft ${SOFT_FDS}, hard ${HARD_FDS}; ${M} SSE streams over ${PROJECTS} projects (fan-out ${FANOUT}), ` +
      `${CLIENTS} client processes, ${SLOW_CLIENTS} slow clients; ${RATE} events/s for ${SECONDS} s` +
      (RATE2 > 0 ? `, then ${RATE2} events/s` : "") + `; scenarios: ${KINDS.join(", ")}`
  )
  if (GOAL_CONNECTIONS + RUNNER_SPARE_FDS > HARD_FDS) {
    console.log(
      `note: the goal of ${GOAL_CONNECTIONS} streams cannot be reached by one process on this machine: each stream is ` +
        `one fd, the hard fd limit is ${HARD_FDS} (raising it needs CAP_SYS_RESOURCE, which this container lacks), ` +
        `and a runner needs ~${RUNNER_SPARE_FDS} more for its pool, Redis and the slow clients`
    )
  }
  if (M + SLOW_CLIENTS + 100 > SOFT_FDS) console.log(`warning: ${M} streams do not fit a process's ${SOFT_FDS} fds`)
  const summaries: Array<Summary> = []
  for (const [i, kind] of KINDS.entries()) {
    if (i > 0) await settleTimeWait()
    summaries.push(await scenario(kind))
  }

  // side by side, and each gateway scenario as a ratio of the ceiling measured in this run
  const ceiling = summaries.find((s) => s.label === "ceiling")
  const ratio = (x: number, c: number | undefined) =>
    c === undefined || !Number.isFinite(c) || c === 0 ? "" : ` (${(x / c).toFixed(2)}× the ceiling)`
  console.log(`\n== bench:sse summary (${M} streams, fan-out ${FANOUT}) ==`)
  for (const s of summaries) {
    console.log(
      `${s.label}: opens ${s.opensPerSecond.toFixed(0)}/s${ratio(s.opensPerSecond, ceiling?.opensPerSecond)}, last ` +
        `quarter ${s.lastQuarterOpensPerSecond.toFixed(0)}/s; ${s.openCpuMsPerStream.toFixed(2)} ms of server CPU ` +
        `per open (goal ≤ 2); idle ${kib(s.idleKiB)} KiB RSS per stream${ratio(s.idleKiB, ceiling?.idleKiB)} (goal ≤ ` +
        `12), live heap ${kib(s.heapKiB)} KiB; ` +
        s.results.map((r, i) =>
          `at ${r.rate}/s commit → client p50 ${r.p50.toFixed(0)} / p99 ${r.p99.toFixed(0)} ms, Redis → client p50 ` +
          `${r.busP50.toFixed(0)} / p99 ${r.busP99.toFixed(0)} ms${ratio(r.busP99, ceiling?.results[i]?.busP99)}`
        ).join("; ") + `\n  ${s.health}`
    )
  }
}

main().then(() => process.exit(0), (e) => {
  console.error(e)
  process.exit(1)
})
