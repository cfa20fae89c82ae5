/**
 * npm run bench:polling — 10,000 in-flight tasks on one runner process, polling the provider simulator under a
 * provider quota of 200 queries/s, run twice on a fresh database each: with idle entities (the default: a task whose
 * next poll or quota slot is far lets its entity go, TASK_IDLE_AFTER / TASK_IDLE_QUOTA_WAIT) and without (the
 * baseline: every in-flight task keeps its entity, as before idle entities). Tasks are admitted in four batches
 * (live heap after a full GC measured after each), written in flight with their provider jobs (BENCH_ADMIT=seed,
 * the default; the runner's sweeper takes them up) or queued and submitted by the runner itself (BENCH_ADMIT=submit),
 * then polled for a measurement window.
 * Prints per run: live heap at 10,000 tasks and per task, entities in memory and tasks parked, the query rate per 5 s
 * bucket against the quota (how many buckets within ±5%) and the quota slots granted in each (the runner's
 * quota_grants_total), poll lateness p50/p99 against next_poll_at, tasks never
 * polled in the window (starvation), the runner's CPU and RSS, event-loop lag p99 and shard-lock losses; then the
 * idle run's live heap against the baseline's.
 *
 *   BENCH_TASKS (10000)  BENCH_QPS (200)  BENCH_WINDOW_S (120)  BENCH_IDLE (both | on | off)  BENCH_SUBMIT_TIMEOUT_S (300)
 *   BENCH_ADMIT (seed: tasks written in flight with their provider jobs | submit: admitted queued, submitted by the runner)
 *   BENCH_IDLE_QUOTA_WAIT (5 seconds: TASK_IDLE_QUOTA_WAIT of the idle run; the runner's default leaves it off)
 *   BENCH_IDLE_AFTER (5 seconds: TASK_IDLE_AFTER of the idle run; the runner's default, 30 s, keeps running tasks awake)
 *   BENCH_HEAP_SNAPSHOTS (a folder: a heap snapshot at each live-heap reading; `node bench/heapSummary.mjs a b`)
 *   BENCH_PROCESSES (1: runner processes on the same database, sharing the quota through REDIS_URL; with 2 the live
 *   heap is each runner's and the rates, entities and CPU are their sums)
 *   DATABASE_URL (admin URL)  REDIS_URL (optional)
 */
import { FetchHttpClient } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { Effect } from "effect"
import type { ChildProcess } from "node:child_process"
import * as fs from "node:fs"
import { createServer } from "node:http"
import * as os from "node:os"
import * as path from "node:path"
import pg from "pg"
import { devSecret } from "../src/providers/devSecrets.js"
import { simulatorOutputHosts } from "../src/simulator/embedded.js"
import { serveSimulator, type Simulator } from "../src/simulator/Simulator.js"
import {
  cpuSeconds,
  freePort,
  freshDatabase,
  gauge,
  healthLine,
  percentile,
  type RunnerHealth,
  sleep,
  startRunnerProcess,
  stopProcess
} from "./support.js"

const TASKS = Number(process.env.BENCH_TASKS ?? 10_000)
const QPS = Number(process.env.BENCH_QPS ?? 200)
const WINDOW_S = Number(process.env.BENCH_WINDOW_S ?? 120)
/** How long one batch may take to be submitted (a loaded machine submits a few per second). */
const SUBMIT_TIMEOUT_S = Number(process.env.BENCH_SUBMIT_TIMEOUT_S ?? 300)
const MODES = (process.env.BENCH_IDLE ?? "both") === "both" ? ["on", "off"] as const : [process.env.BENCH_IDLE as Mode]
type Mode = "on" | "off"
/** The baseline: no task ever goes idle, and an entity stays as long as the library's default said. */
const IDLE_OFF = {
  TASK_IDLE_AFTER: "1000 hours",
  TASK_IDLE_QUOTA_WAIT: "1000 hours",
  TASK_ENTITY_IDLE_TIME: "5 minutes"
}
/**
 * The idle run: a task parks whenever its next poll is 5 s away or more (running tasks poll every 5–15 s, so the
 * runner's default of 30 s keeps every one of them awake, ~65 KiB each) or its quota slot is.
 */
const IDLE_ON = {
  TASK_IDLE_AFTER: process.env.BENCH_IDLE_AFTER ?? "5 seconds",
  TASK_IDLE_QUOTA_WAIT: process.env.BENCH_IDLE_QUOTA_WAIT ?? "5 seconds"
}
const BATCHES = 4
const PROCESSES = Number(process.env.BENCH_PROCESSES ?? 1)
if (!(PROCESSES >= 1) || (PROCESSES > 1 && process.env.REDIS_URL === undefined)) {
  console.error("BENCH_PROCESSES: 1 or more, and more than 1 only with REDIS_URL (the quota is shared through Redis)")
  process.exit(2)
}
const adminUrl = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres"

const mib = (kib: number) => (kib / 1024).toFixed(0)
/** A 5 s bucket's rate within ±5% of the quota (the goal). */
const withinQuota = (rate: number) => Math.abs(rate - QPS) <= QPS * 0.05

/** The runner's resident memory (KiB) and CPU time (seconds) from /proc. */
const usage = (pid: number) => {
  const rss = Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, "utf8"))![1])
  return { rssKiB: rss, cpuSeconds: cpuSeconds(pid) }
}

/** A folder: the runner writes a heap snapshot there at each live-heap reading (bench/heapSummary.mjs reads them). */
const SNAPSHOTS = process.env.BENCH_HEAP_SNAPSHOTS ?? ""
const probeFile = (runner: number) => path.join(os.tmpdir(), `bench-polling-memory-${process.pid}-${runner}.json`)

/** The runner's live heap after a full GC (bench/memoryProbe.mjs answers SIGUSR2), in KiB. */
const liveHeap = async (pid: number, runner: number) => {
  const file = probeFile(runner)
  fs.rmSync(file, { force: true })
  process.kill(pid, "SIGUSR2")
  // a heap snapshot first (BENCH_HEAP_SNAPSHOTS) takes tens of seconds
  const tries = SNAPSHOTS === "" ? 100 : 3000
  for (let i = 0; i < tries && !fs.existsSync(file); i++) await sleep(100)
  await sleep(100)
  return JSON.parse(fs.readFileSync(file, "utf8")).heapUsed / 1024
}

/** Every runner's live heap (KiB), in order. */
const liveHeaps = async (pids: ReadonlyArray<number>) => {
  const heaps: Array<number> = []
  for (const [i, pid] of pids.entries()) heaps.push(await liveHeap(pid, i))
  return heaps
}
const sum = (xs: ReadonlyArray<number>) => xs.reduce((a, b) => a + b, 0)
const max = (xs: ReadonlyArray<number>) => Math.max(...xs)

const startRunner = async (
  databaseUrl: string,
  simUrl: string,
  objects: string,
  mode: Mode,
  prefix: string,
  index: number
) => {
  const nodeArgs = (process.env.BENCH_NODE_ARGS ?? "").split(" ").filter((a) => a.length > 0)
  const probe = ["--expose-gc", "--import", "./bench/memoryProbe.mjs"]
  const { child, health, httpPort } = await startRunnerProcess({
    DATABASE_URL: databaseUrl,
    RUNWAY_BASE_URL: `${simUrl}/runway`,
    ...simulatorOutputHosts(simUrl, ["runway"]),
    RUNWAY_LOOKUP: "true",
    // events go through the in-process queue: this bench measures polling (bench:propagation the queue)
    ROCKETMQ_ENDPOINTS: "",
    QUOTA_RUNWAY_QPS: String(QPS),
    QUOTA_TENANT_QPS: String(QPS * 10),
    QUOTA_GLOBAL_QPS: String(QPS * 10),
    REDIS_KEY_PREFIX: prefix,
    SUBMIT_CONCURRENCY: String(TASKS * 2),
    OBJECT_STORE_DIR: objects,
    SWEEP_INTERVAL: "1 second",
    SWEEP_GRACE: "1 second",
    // as many a second as the provider's quota lets submit: a sweep of 1,000 woke 2,500 tasks within two seconds, and
    // their queries waited on the 20 pooled connections past DB_CONNECT_TIMEOUT (1,310 of 2,500 submitted in 300 s)
    SWEEP_BATCH: String(QPS),
    MEMORY_PROBE_FILE: probeFile(index),
    MEMORY_PROBE_SNAPSHOTS: SNAPSHOTS,
    ...(mode === "off" ? IDLE_OFF : IDLE_ON)
  }, { nodeArgs: [...nodeArgs, ...probe] })
  return { child, httpPort, health }
}

/** Admits `n` Runway tasks in one statement (task, PREPARED attempt, reserve), as the API would one by one. */
const admit = (db: pg.Client, project: string, tenant: string, n: number) =>
  db.query(
    `WITH t AS (
       INSERT INTO generation_tasks (id, tenant_id, project_id, user_id, idempotency_key, request_hash, request,
         status, stage, version, last_seq, current_attempt_id, home_region, write_epoch)
       SELECT gen_random_uuid(), $2, $1, gen_random_uuid(), gen_random_uuid()::text, 'h',
         '{"prompt":"bench","duration_seconds":5}', 'queued', 'queued', 1, 0, gen_random_uuid(), 'local', 1
       FROM generate_series(1, $3)
       RETURNING id, current_attempt_id, tenant_id
     ), a AS (
       INSERT INTO task_attempts (id, task_id, attempt_no, provider, model, client_request_id, submit_state)
       SELECT current_attempt_id, id, 1, 'runway', 'gen4.5', gen_random_uuid()::text, 'PREPARED' FROM t
     )
     INSERT INTO credit_ledger (tenant_id, task_id, attempt_id, ledger_type, amount)
     SELECT tenant_id, id, NULL, 'reserve', 5 FROM t`,
    [project, tenant, n]
  )

/**
 * Admits `n` Runway tasks already in flight (BENCH_ADMIT=seed): the provider's jobs are created in the simulator
 * (as accepted submissions), the tasks written `running` with their job, their poll overdue by more than the
 * sweeper's grace, so the runner takes them up as it would tasks whose entity was lost: the sweeper wakes them, each
 * polls or parks in the quota's line. Submitting them one by one (BENCH_ADMIT=submit) measures admission instead:
 * on 2 cores it ran at 8–15 submissions/s beside the polls, so 10,000 took most of an hour.
 */
const seed = async (db: pg.Client, sim: Simulator, simUrl: string, project: string, tenant: string, n: number) => {
  const keys = Array.from({ length: n }, () => crypto.randomUUID())
  const jobs = await Effect.runPromise(Effect.forEach(keys, (key) => sim.seed("runway", key, "gen4.5", simUrl)))
  await db.query(
    `WITH j AS (
       SELECT key, job, gen_random_uuid() AS task, gen_random_uuid() AS attempt
       FROM unnest($3::text[], $4::text[]) AS u(key, job)
     ), t AS (
       INSERT INTO generation_tasks (id, tenant_id, project_id, user_id, idempotency_key, request_hash, request,
         status, stage, version, last_seq, current_attempt_id, home_region, write_epoch)
       SELECT task, $2, $1, gen_random_uuid(), key, 'h', '{"prompt":"bench","duration_seconds":5}', 'running',
         'generating', 3, 0, attempt, 'local', 1 FROM j
     ), a AS (
       INSERT INTO task_attempts (id, task_id, attempt_no, provider, model, client_request_id, provider_task_id,
         submit_state, submit_started_at, next_poll_at)
       SELECT attempt, task, 1, 'runway', 'gen4.5', key, job, 'RUNNING', now(), now() - interval '10 minutes' FROM j
     )
     INSERT INTO credit_ledger (tenant_id, task_id, attempt_id, ledger_type, amount)
     SELECT $2, task, NULL, 'reserve', 5 FROM j`,
    [project, tenant, keys, jobs]
  )
}
const ADMIT = process.env.BENCH_ADMIT ?? "seed"

const inFlight = async (db: pg.Client) =>
  Number(
    (await db.query(`SELECT count(*) FROM task_attempts WHERE submit_state IN ('SUBMITTED', 'RUNNING')`)).rows[0]
      .count
  )

/** Transactions committed in the bench's database so far (every statement outside a transaction is one). */
const transactions = async (db: pg.Client) =>
  Number(
    (await db.query(`SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`)).rows[0]
      .xact_commit
  )

/** Seeded tasks the runner has not taken up yet: never polled, and their poll still overdue by minutes. */
const untouched = async (db: pg.Client) =>
  Number(
    (await db.query(
      `SELECT count(*) FROM task_attempts WHERE last_polled_at IS NULL AND next_poll_at < now() - interval '5 minutes'`
    )).rows[0].count
  )

interface Result {
  readonly mode: Mode
  readonly idleHeapKiB: number
  readonly heapKiB: number
  readonly perTaskKiB: number
  readonly withinBuckets: number
  readonly buckets: number
}

/** One run on a fresh database: `mode` says whether task entities may go idle. */
const run = (sim: Simulator, simUrl: string, mode: Mode) =>
  Effect.promise(async (): Promise<Result> => {
    const admin = new pg.Client({ connectionString: adminUrl })
    await admin.connect()
    const database = await freshDatabase(admin, adminUrl, "bench_polling")
    const objects = fs.mkdtempSync(path.join(os.tmpdir(), "bench-polling-"))
    const runners: Array<ChildProcess> = []
    const healths: Array<RunnerHealth> = []
    const db = new pg.Client({ connectionString: database.url })
    try {
      console.log(
        `\n-- idle entities ${mode}: ${JSON.stringify(mode === "off" ? IDLE_OFF : IDLE_ON)}, ${PROCESSES} runner ` +
          `process(es) --`
      )
      const prefix = `bench-${Date.now().toString(36)}:`
      const ports: Array<number> = []
      for (let i = 0; i < PROCESSES; i++) {
        const started = await startRunner(database.url, simUrl, objects, mode, prefix, i)
        runners.push(started.child)
        healths.push(started.health)
        ports.push(started.httpPort)
      }
      const pids = runners.map((r) => r.pid!)
      /** The runners' CPU time summed, each one's RSS and live heap. */
      const usages = () => pids.map(usage)
      await db.connect()
      await sleep(3000)
      const idleHeaps = await liveHeaps(pids)
      const idle = { rssKiB: max(usages().map((u) => u.rssKiB)), heapKiB: max(idleHeaps) }
      console.log(`runner idle: RSS ${mib(idle.rssKiB)} MiB, live heap ${idleHeaps.map(mib).join(" / ")} MiB`)
      const project = crypto.randomUUID()
      const tenant = crypto.randomUUID()
      await db.query(`INSERT INTO projects (project_id, tenant_id, stream_epoch) VALUES ($1, $2, 1)`, [project, tenant])
      const growth: Array<{ tasks: number; rssKiB: number; heapKiB: number }> = []
      for (let b = 1; b <= BATCHES; b++) {
        const target = Math.round((TASKS * b) / BATCHES)
        const batchStart = Date.now()
        const n = target - Math.round((TASKS * (b - 1)) / BATCHES)
        if (ADMIT === "seed") await seed(db, sim, simUrl, project, tenant, n)
        else await admit(db, project, tenant, n)
        // seeded: in flight once the runner has every task in hand, polled or held (an entity, or parked in the
        // quota's line: a line longer than the quota lets through would take minutes to poll each once)
        const inHand = async () =>
          (await untouched(db)) === 0 ||
          (await gauge(ports, "effect_cluster_entities")) + (await gauge(ports, "tasks_parked")) >=
            target
        while (ADMIT === "seed" ? !(await inHand()) : (await inFlight(db)) < target) {
          if (Date.now() - batchStart > SUBMIT_TIMEOUT_S * 1000) {
            throw new Error(
              ADMIT === "seed"
                ? `the runners took ${
                  (await gauge(ports, "effect_cluster_entities")) + (await gauge(ports, "tasks_parked"))
                } of ${target} seeded tasks in hand (${await untouched(db)} never touched) in ${SUBMIT_TIMEOUT_S} s`
                : `only ${await inFlight(db)} of ${target} submitted in ${SUBMIT_TIMEOUT_S} s`
            )
          }
          await sleep(1000)
        }
        const submitS = (Date.now() - batchStart) / 1000
        await sleep(10_000)
        const heaps = await liveHeaps(pids)
        const u = { rssKiB: max(usages().map((x) => x.rssKiB)), heapKiB: max(heaps) }
        growth.push({ tasks: target, rssKiB: u.rssKiB, heapKiB: u.heapKiB })
        console.log(
          `${target} tasks in flight (batch submitted in ${submitS.toFixed(1)} s): live heap ${
            heaps.map(mib).join(" / ")
          } MiB (${((sum(heaps) - sum(idleHeaps)) / target).toFixed(1)} KiB per task over idle, all runners), ` +
            `RSS ${mib(u.rssKiB)} MiB (largest runner)`
        )
      }
      console.log("warming up 20 s ...")
      await sleep(20_000)
      const windowStart = (await db.query(`SELECT now() AS t`)).rows[0].t as Date
      // each bucket is divided by the time it really spanned, and they follow one another on a fixed 5 s grid: the
      // bookkeeping between two (the scrapes, the lateness query) neither stretches a bucket nor drifts the next one
      const t0 = performance.now()
      const q0 = sim.stats.queries
      const g0 = await gauge(ports, "quota_grants_total")
      const x0 = await transactions(db)
      const u0 = sum(usages().map((u) => u.cpuSeconds))
      const lateness: Array<number> = []
      const buckets: Array<number> = []
      // the slots granted in each bucket (the runner's counter, scraped just after the bucket's query count): whether
      // a bucket's miss is the quota's (grants) or the wakes' (queries sent after their grant)
      const grantBuckets: Array<number> = []
      const entities: Array<number> = []
      const parked: Array<number> = []
      let prev = windowStart
      let lastQueries = q0
      let lastAt = t0
      let lastGrants = g0
      let lastGrantsAt = t0
      for (let i = 1; i * 5 <= WINDOW_S; i++) {
        await sleep(Math.max(0, t0 + i * 5000 - performance.now()))
        const at = performance.now()
        const queries = sim.stats.queries
        buckets.push((queries - lastQueries) / ((at - lastAt) / 1000))
        lastQueries = queries
        lastAt = at
        const grants = await gauge(ports, "quota_grants_total")
        const grantsAt = performance.now()
        grantBuckets.push((grants - lastGrants) / ((grantsAt - lastGrantsAt) / 1000))
        lastGrants = grants
        lastGrantsAt = grantsAt
        entities.push(await gauge(ports, "effect_cluster_entities"))
        parked.push(await gauge(ports, "tasks_parked"))
        const now = (await db.query(`SELECT now() AS t`)).rows[0].t as Date
        const rows = await db.query(
          `SELECT last_poll_lateness_ms AS l FROM task_attempts WHERE last_polled_at > $1 AND last_polled_at <= $2`,
          [prev, now]
        )
        for (const r of rows.rows) lateness.push(Number(r.l))
        prev = now
      }
      const rate = (lastQueries - q0) / ((lastAt - t0) / 1000)
      const g1 = await gauge(ports, "quota_grants_total")
      const xacts = (await transactions(db)) - x0
      const u1 = sum(usages().map((u) => u.cpuSeconds))
      // the grants and the CPU were read a moment after the last bucket: over their own span
      const spanS = (performance.now() - t0) / 1000
      const granted = (g1 - g0) / spanS
      const cpu = ((u1 - u0) / spanS) * 100
      const rss1 = max(usages().map((u) => u.rssKiB))
      const heaps = await liveHeaps(pids)
      const heapKiB = max(heaps)
      const starved = await db.query(
        `SELECT count(*) FILTER (WHERE last_polled_at IS NULL OR last_polled_at < $1)::int AS never,
                max(extract(epoch FROM now() - last_polled_at))::float AS oldest_s
         FROM task_attempts WHERE submit_state IN ('SUBMITTED', 'RUNNING')`,
        [windowStart]
      )
      const within = buckets.filter(withinQuota).length
      console.log(
        `\n== bench:polling, idle entities ${mode}: ${TASKS} tasks in flight on ${PROCESSES} runner process(es), ` +
          `provider quota ${QPS}/s, ${WINDOW_S} s ==`
      )
      console.log(
        `live heap after the window: ${heaps.map(mib).join(" / ")} MiB (${
          ((sum(heaps) - sum(idleHeaps)) / TASKS).toFixed(1)
        } KiB per task over the idle runners' ${idleHeaps.map(mib).join(" / ")} MiB; goal ≤ 200 MiB on one runner)`
      )
      console.log(
        `entities in memory (5 s samples): median ${percentile(entities, 50)}, max ${Math.max(...entities)}; ` +
          `tasks parked: median ${percentile(parked, 50)}`
      )
      console.log(
        `query rate: ${rate.toFixed(1)}/s sustained = ${((rate / QPS) * 100).toFixed(1)}% of the quota; ` +
          `${within} of ${buckets.length} 5 s buckets within ±5% (${(QPS * 0.95).toFixed(0)}–${
            (QPS * 1.05).toFixed(0)
          }/s): ${buckets.map((r) => r.toFixed(0)).join(" ")}`
      )
      console.log(
        `quota slots granted: ${granted.toFixed(1)}/s = ${((granted / QPS) * 100).toFixed(1)}% of the quota; ` +
          `queries sent per slot granted: ${(rate / granted).toFixed(3)}; per 5 s bucket: ${
            grantBuckets.map((r) => r.toFixed(0)).join(" ")
          } (${grantBuckets.filter(withinQuota).length} within ±5%)`
      )
      console.log(
        `PostgreSQL transactions in the window: ${(xacts / (lastQueries - q0)).toFixed(2)} per query sent ` +
          `(the whole database: the runner's statements, its cluster's, and this bench's few)`
      )
      console.log(
        `poll lateness vs next_poll_at (${lateness.length} polls): p50 ${
          (percentile(lateness, 50) / 1000).toFixed(1)
        } s, p99 ${(percentile(lateness, 99) / 1000).toFixed(1)} s`
      )
      console.log(
        `starvation: ${starved.rows[0].never} tasks not polled in the window; ` +
          `longest since a task's last poll ${Number(starved.rows[0].oldest_s).toFixed(1)} s`
      )
      console.log(`runner CPU: ${cpu.toFixed(0)}% of one core (all runners); RSS ${mib(rss1)} MiB (largest runner)`)
      const perTask = (f: (g: (typeof growth)[number]) => number) =>
        ((f(growth.at(-1)!) - f(growth[0]!)) / (growth.at(-1)!.tasks - growth[0]!.tasks)).toFixed(1)
      console.log(
        `memory growth: ${
          growth.map((g) => `${g.tasks} tasks: heap ${mib(g.heapKiB)} / RSS ${mib(g.rssKiB)} MiB`).join(", ")
        }; per task (last batch vs first): live heap ${perTask((g) => g.heapKiB)} KiB, RSS ${
          perTask((g) => g.rssKiB)
        } KiB`
      )
      console.log(healthLine(healths.splice(0).map((h) => h.stop())))
      return {
        mode,
        idleHeapKiB: idle.heapKiB,
        heapKiB,
        perTaskKiB: (sum(heaps) - sum(idleHeaps)) / TASKS,
        withinBuckets: within,
        buckets: buckets.length
      }
    } finally {
      for (const h of healths) h.stop()
      for (const r of runners) await stopProcess(r, "SIGTERM")
      await db.end().catch(() => undefined)
      await database.drop()
      await admin.end()
      fs.rmSync(objects, { recursive: true, force: true })
    }
  })

Effect.gen(function*() {
  const simPort = yield* Effect.promise(freePort)
  yield* Effect.gen(function*() {
    const sim = yield* serveSimulator({
      openaiSecret: devSecret("openai"),
      replicateSecret: devSecret("replicate"),
      openaiWebhookUrl: null
    })
    // long jobs, running almost at once: every task stays in flight and is polled at the running interval
    yield* sim.setFaults({ jobDurationMs: 3_600_000, queuedShare: 0.001 })
    const results: Array<Result> = []
    for (const mode of MODES) {
      // every run starts with the provider's line empty (jobs of the last run are no longer polled)
      results.push(yield* run(sim, sim.baseUrl, mode))
    }
    const on = results.find((r) => r.mode === "on")
    const off = results.find((r) => r.mode === "off")
    if (on !== undefined && off !== undefined) {
      console.log(
        `\n== idle entities against the baseline (every task keeps its entity), same machine, same run ==\n` +
          `live heap with ${TASKS} tasks: ${mib(on.heapKiB)} MiB idle on vs ${mib(off.heapKiB)} MiB off ` +
          `(${((on.heapKiB / off.heapKiB) * 100).toFixed(0)}%); per task ${on.perTaskKiB.toFixed(1)} vs ` +
          `${off.perTaskKiB.toFixed(1)} KiB; 5 s buckets within ±5% of the quota: ${on.withinBuckets}/${on.buckets} ` +
          `vs ${off.withinBuckets}/${off.buckets}`
      )
    }
  }).pipe(
    Effect.provide(NodeHttpServer.layer(createServer, { host: "127.0.0.1", port: simPort })),
    Effect.provide(FetchHttpClient.layer),
    Effect.scoped
  )
}).pipe(Effect.runPromise).then(() => process.exit(0), (e) => {
  console.error(e)
  process.exit(1)
})
