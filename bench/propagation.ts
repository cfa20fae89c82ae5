/**
 * npm run bench:propagation — committed events through the outbox relay, RocketMQ and the notification dispatcher
 * into Redis Pub/Sub, measured at a Redis subscriber (what a gateway would see). One runner process (relay +
 * dispatcher) on a fresh database; this process commits outbox rows (valid domain events of 1,000 tasks of one
 * project) and subscribes to the project's channel.
 *   1. sustained: commits as fast as BENCH_MAX_RATE allows for BENCH_SECONDS; prints delivered events/s;
 *   2. latency: 1,000 events/s, then 500 events/s, for BENCH_SECONDS each; prints commit → Redis delivery p50/p99.
 *
 *   DATABASE_URL  ROCKETMQ_ENDPOINTS  REDIS_URL  BENCH_SECONDS (20)  BENCH_MAX_RATE (4000)
 *   BENCH_NODE_ARGS (node flags for the runner, e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof")
 */
import { Redis } from "ioredis"
import { type ChildProcess, execFileSync } from "node:child_process"
import pg from "pg"
import { percentile, sleep, startRunnerProcess, stopProcess } from "./support.js"

const adminUrl = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres"
const endpoints = process.env.ROCKETMQ_ENDPOINTS ?? "127.0.0.1:8081"
const redisUrl = process.env.REDIS_URL ?? "redis://127.0.0.1:6379"
const SECONDS = Number(process.env.BENCH_SECONDS ?? 20)
const MAX_RATE = Number(process.env.BENCH_MAX_RATE ?? 4000)
const TASKS = 1000
const suffix = Date.now().toString(36)
const topic = `bench-events-${suffix}`
const group = `bench-dispatcher-${suffix}`
const prefix = `bench-${suffix}:`
const project = crypto.randomUUID()
const tenant = crypto.randomUUID()
const tasks = Array.from({ length: TASKS }, () => crypto.randomUUID())

const startRunner = async (databaseUrl: string) => {
  const { child } = await startRunnerProcess({
    DATABASE_URL: databaseUrl,
    ROCKETMQ_ENDPOINTS: endpoints,
    ROCKETMQ_TOPIC: topic,
    DISPATCHER_GROUP: group,
    REDIS_URL: redisUrl,
    REDIS_KEY_PREFIX: prefix,
    INBOX_PROCESSOR_ENABLED: "false"
  }, { nodeArgs: (process.env.BENCH_NODE_ARGS ?? "").split(" ").filter((a) => a.length > 0) })
  return child
}

let seq = 0
/** Commits `n` outbox rows (domain events with consecutive cursors) in one transaction; returns the first seq. */
const commitBatch = async (db: pg.Client, n: number) => {
  const from = seq + 1
  seq += n
  await db.query(
    `INSERT INTO outbox_events (event_id, aggregate_type, aggregate_id, aggregate_version, event_type, payload,
       home_region, write_epoch)
     SELECT e.id, 'generation_task', e.task, s, 'task.status.changed',
       jsonb_build_object('event_id', e.id, 'event_type', 'task.status.changed', 'schema_version', 1,
         'aggregate_id', e.task, 'aggregate_version', s, 'tenant_id', $3::uuid, 'project_id', $4::uuid,
         'user_id', $3::uuid, 'attempt_id', NULL, 'cursor', '1-' || s, 'status', 'running', 'stage', 'generating',
         'progress', s % 100, 'asset_id', NULL, 'error_code', NULL, 'source', 'poll', 'home_region', 'local',
         'write_epoch', 1, 'occurred_at', now()::text, 'trace_id', 'bench'),
       'local', 1
     FROM generate_series($1::bigint, $2::bigint) s,
       LATERAL (SELECT gen_random_uuid() AS id, ($5::uuid[])[1 + s % ${TASKS}] AS task) e`,
    [from, seq, tenant, project, tasks]
  )
  return from
}

/** Commits at `rate` events/s for `seconds`, in 20 ms ticks; remembers when each seq was committed. */
const drive = async (db: pg.Client, rate: number, seconds: number, committedAt: Map<number, number>) => {
  const started = performance.now()
  let sent = 0
  while (performance.now() - started < seconds * 1000) {
    const due = Math.floor(((performance.now() - started) / 1000) * rate) - sent
    if (due > 0) {
      const n = Math.min(due, 500)
      const from = await commitBatch(db, n)
      const at = performance.now()
      for (let s = from; s < from + n; s++) committedAt.set(s, at)
      sent += n
    } else {
      await sleep(20)
    }
  }
  return sent
}

const main = async () => {
  execFileSync("scripts/rocketmq.sh", ["topic", topic, group], { stdio: "inherit" })
  const admin = new pg.Client({ connectionString: adminUrl })
  await admin.connect()
  const name = `bench_propagation_${suffix}`
  await admin.query(`CREATE DATABASE ${name}`)
  const url = new URL(adminUrl)
  url.pathname = `/${name}`
  let runner: ChildProcess | undefined
  const db = new pg.Client({ connectionString: url.toString() })
  const sub = new Redis(redisUrl)
  try {
    runner = await startRunner(url.toString())
    await db.connect()
    const received = new Map<number, number>()
    await sub.subscribe(`${prefix}project:${project}`)
    sub.on("message", (_channel: string, message: string) => {
      const s = Number((JSON.parse(message) as { cursor: string }).cursor.split("-")[1])
      if (!received.has(s)) received.set(s, performance.now())
    })
    const committedAt = new Map<number, number>()
    // warm-up: the consumer and the producer settle
    await drive(db, 200, 3, committedAt)
    await sleep(3000)

    const startSeq = seq
    const t0 = performance.now()
    const sent = await drive(db, MAX_RATE, SECONDS, committedAt)
    const commitSeconds = (performance.now() - t0) / 1000
    const deadline = performance.now() + 120_000
    while (performance.now() < deadline && [...received.keys()].filter((s) => s > startSeq).length < sent) {
      await sleep(200)
    }
    const inPhase = [...received.entries()].filter(([s]) => s > startSeq)
    const lastAt = Math.max(...inPhase.map(([, at]) => at))
    const deliveredRate = inPhase.length / ((lastAt - t0) / 1000)
    console.log(`\n== bench:propagation: outbox → RocketMQ → dispatcher → Redis (one runner process) ==`)
    console.log(
      `sustained: committed ${sent} events in ${commitSeconds.toFixed(1)} s (${
        (sent / commitSeconds).toFixed(0)
      }/s); ` +
        `delivered ${inPhase.length} to the Redis subscriber at ${deliveredRate.toFixed(0)} events/s ` +
        `(first commit → last delivery)`
    )

    // latency at the 1,000 events/s, and at a rate below the sustained capacity
    for (const rate of [1000, 500]) {
      await sleep(5000)
      const latencyStart = seq
      const sent2 = await drive(db, rate, SECONDS, committedAt)
      const deadline2 = performance.now() + 90_000
      while (performance.now() < deadline2 && [...received.keys()].filter((s) => s > latencyStart).length < sent2) {
        await sleep(200)
      }
      const latencies = [...received.entries()].filter(([s]) => s > latencyStart).map(([s, at]) =>
        at - committedAt.get(s)!
      )
      console.log(
        `at ${rate} events/s for ${SECONDS} s: ${latencies.length}/${sent2} delivered; commit → Redis delivery ` +
          `p50 ${percentile(latencies, 50).toFixed(1)} ms, p99 ${percentile(latencies, 99).toFixed(1)} ms, ` +
          `max ${Math.max(...latencies).toFixed(0)} ms`
      )
    }
  } finally {
    sub.disconnect()
    if (runner !== undefined) await stopProcess(runner, "SIGTERM")
    await db.end().catch(() => undefined)
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
    await admin.end()
  }
}

main().then(() => process.exit(0), (e) => {
  console.error(e)
  process.exit(1)
})
