/**
 * npm run bench:propagation — committed events through the outbox relay, RocketMQ and the notification dispatcher
 * into Redis Pub/Sub, measured at a Redis subscriber (what a gateway would see). One runner process (relay +
 * dispatcher) on a fresh database; this process commits outbox rows (valid domain events of 1,000 tasks of one
 * project) and subscribes to the project's channel.
 *   0. ceiling: the RocketMQ client alone (no code of ours) on a fresh FIFO topic: a Producer sends messages of the
 *      same size over the same 1,000 message groups, in batches of the relay's size with as many groups side by side
 *      (each group's messages one after another), while a SimpleConsumer receives them as the dispatcher does
 *      (ROCKETMQ_RECEIVERS receives of 32 in flight, one ack per message); prints send → receive events/s;
 *   1. sustained: commits as fast as BENCH_MAX_RATE allows for BENCH_SECONDS; prints delivered events/s; then the
 *      ceiling again, and the ratio to the mean of the ceilings before and after (the machine's load drifts);
 *   2. latency: 1,000 events/s, then 500 events/s, for BENCH_SECONDS each; prints commit (the INSERT's COMMIT
 *      returned here) → Redis delivery (this process's subscriber got it) p50/p99; before each phase, its ceiling:
 *      the RocketMQ client alone at the same rate (20 ms ticks, as the commits come; groups side by side; the same
 *      receives), send called → message received p50/p99, and this process's CPU per message (the client's own cost
 *      of a send and its receive, beside the runner's CPU per event); after each phase, from the runner's
 *      queue_consume_lag_seconds (the relay's send → the dispatcher's receive), the share within 10/50/100/250 ms,
 *      which tells the relay's part of the tail (commit → send) from the broker's (send → receive); for the ceiling
 *      and each phase, the p50/p99 of what was sent (committed) in its first 5 s (the step from idle to its rate)
 *      and of the rest;
 *   and the runner's event-loop lag p99 and shard-lock losses.
 * BENCH_PROCESSES=2 splits the runner in two processes by their roles: the relay's (api,entities,singletons) and the
 * dispatcher's (dispatcher), each on its own event loop (README, "Production"); the lag shares are the dispatcher's.
 *
 *   DATABASE_URL  ROCKETMQ_ENDPOINTS  REDIS_URL  BENCH_SECONDS (20)  BENCH_MAX_RATE (4000)
 *   BENCH_PHASES ("sustained,latency"; "latency" alone skips the rate ceilings and the sustained phase)
 *   BENCH_NODE_ARGS (node flags for the runner, e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof")  BENCH_PROCESSES (1 | 2)
 */
import { Redis } from "ioredis"
import { type ChildProcess, execFileSync } from "node:child_process"
import pg from "pg"
import { defaults as rocketMQ } from "../src/queue/RocketMQQueue.js"
import { ceilingClients, clientAtRate } from "./rocketmqCeiling.js"
import {
  cpuSeconds,
  freshDatabase,
  healthLine,
  metricIn,
  percentile,
  type RunnerHealth,
  sleep,
  startRunnerProcess,
  stopProcess
} from "./support.js"

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
// the runner's defaults, which the ceiling takes too (the queue's from RocketMQQueue.ts; OUTBOX_BATCH_SIZE's 256)
const BATCH = Number(process.env.OUTBOX_BATCH_SIZE ?? 256)
const SEND_CONCURRENCY = Number(process.env.ROCKETMQ_SEND_CONCURRENCY ?? rocketMQ.sendConcurrency)
const RECEIVERS = Number(process.env.ROCKETMQ_RECEIVERS ?? rocketMQ.receivers)
const ceilingTopic = `bench-ceiling-${suffix}`
const ceilingGroup = `bench-ceiling-consumer-${suffix}`
/** The start of a latency phase (the step from idle to its rate), reported apart from the rest of it. */
const STEP_MS = 5000
const PHASES = (process.env.BENCH_PHASES ?? "sustained,latency").split(",")
const PROCESSES = Number(process.env.BENCH_PROCESSES ?? 1)
if (PROCESSES !== 1 && PROCESSES !== 2) {
  console.error("BENCH_PROCESSES: 1 (one runner with every role) or 2 (the relay's and the dispatcher's processes)")
  process.exit(2)
}
/** The runner processes: their roles (unset: every role) and what says they have started. */
const RUNNERS: ReadonlyArray<{ readonly roles?: string; readonly readyPath?: string }> = PROCESSES === 1
  ? [{}]
  : [{ roles: "api,entities,singletons" }, { roles: "dispatcher", readyPath: "/readyz" }]

/** A domain event's JSON as the outbox holds it (jsonb's text), for the ceiling's message bodies. */
const sampleBody = (task: string, s: number) =>
  JSON.stringify({
    cursor: `1-${s}`,
    source: "poll",
    stage: "generating",
    status: "running",
    user_id: tenant,
    asset_id: null,
    event_id: crypto.randomUUID(),
    progress: s % 100,
    trace_id: "bench",
    tenant_id: tenant,
    attempt_id: null,
    error_code: null,
    event_type: "task.status.changed",
    project_id: project,
    home_region: "local",
    occurred_at: new Date().toISOString(),
    write_epoch: 1,
    aggregate_id: task,
    schema_version: 1,
    aggregate_version: s
  }).replaceAll(":", ": ").replaceAll(",", ", ")

/**
 * "sent in the first 5 s: p50/p99; after them: p50/p99" for (start, latency) samples: the step from idle to a
 * phase's rate apart from the rest of it.
 */
const stepLine = (what: string, samples: ReadonlyArray<readonly [number, number]>) => {
  // a loop, not Math.min(...): a phase's samples grow with BENCH_SECONDS past what a call's arguments may hold
  const from = samples.reduce((min, [at]) => Math.min(min, at), Infinity)
  const part = (early: boolean) => {
    const xs = samples.filter(([at]) => (at - from < STEP_MS) === early).map(([, latency]) => latency)
    return `p50 ${percentile(xs, 50).toFixed(1)} ms, p99 ${percentile(xs, 99).toFixed(1)} ms`
  }
  return `  ${what} in the first ${STEP_MS / 1000} s: ${part(true)}; after them: ${part(false)}`
}

/**
 * The RocketMQ client's own send → receive rate for `seconds`: batches of BATCH messages over the 1,000 groups, each
 * batch sent with SEND_CONCURRENCY groups side by side, while RECEIVERS receive loops take and ack them.
 */
const ceiling = async (seconds: number) => {
  const { producer, consumer } = await ceilingClients(endpoints, ceilingTopic, ceilingGroup)
  let received = 0
  let lastReceivedAt = 0
  let receiving = true
  const receiveLoop = async () => {
    while (receiving) {
      const messages = await consumer.receive(32, 30_000).catch(() => [])
      await Promise.all(messages.map((m) => consumer.ack(m).catch(() => undefined)))
      received += messages.length
      if (messages.length > 0) lastReceivedAt = performance.now()
    }
  }
  const loops = Array.from({ length: RECEIVERS }, receiveLoop)
  let sent = 0
  let s = 0
  const started = performance.now()
  while (performance.now() - started < seconds * 1000) {
    const batch = Array.from({ length: BATCH }, () => {
      s++
      const task = tasks[s % TASKS]!
      return { task, body: Buffer.from(sampleBody(task, s)) }
    })
    const byTask = new Map<string, typeof batch>()
    for (const m of batch) byTask.set(m.task, [...(byTask.get(m.task) ?? []), m])
    const groups = [...byTask.values()]
    let next = 0
    const worker = async () => {
      while (next < groups.length) {
        for (const m of groups[next++]!) {
          await producer.send({ topic: ceilingTopic, body: m.body, keys: [m.task], messageGroup: m.task })
        }
      }
    }
    await Promise.all(Array.from({ length: SEND_CONCURRENCY }, worker))
    sent += batch.length
  }
  const sentSeconds = (performance.now() - started) / 1000
  const deadline = performance.now() + 60_000
  while (received < sent && performance.now() < deadline) await sleep(100)
  receiving = false
  const rate = received / ((lastReceivedAt - started) / 1000)
  await Promise.race([Promise.all(loops), sleep(6000)])
  await producer.shutdown().catch(() => undefined)
  await consumer.shutdown().catch(() => undefined)
  console.log(
    `ceiling (RocketMQ client alone): sent ${sent} in ${sentSeconds.toFixed(1)} s (${
      (sent / sentSeconds).toFixed(0)
    }/s); ` +
      `received ${received} at ${rate.toFixed(0)}/s (first send → last receive)`
  )
  return rate
}

/**
 * The RocketMQ client's own send → receive latency at `rate` messages/s for `seconds` (bench/rocketmqCeiling.ts), on a
 * topic and group of its own (a new group on the rate ceiling's topic first took that topic's whole backlog: after
 * the sustained phase its p50 was 11–14 s, the time to work off some 100,000 old messages, not a latency), over the
 * 1,000 groups; the p50/p99 of send called → received, the floor under the pipeline's commit → Redis delivery.
 */
const ceilingLatency = async (rate: number, seconds: number) => {
  const { cpuMs, samples, sent } = await clientAtRate({
    endpoints,
    topic: `${ceilingTopic}-latency`,
    group: `${ceilingGroup}-latency`,
    rate,
    seconds,
    receivers: RECEIVERS,
    message: (s) => {
      const task = tasks[s % TASKS]!
      return { body: sampleBody(task, s), group: task }
    }
  })
  const latencies = samples.map(([, latency]) => latency)
  console.log(
    `ceiling at ${rate} messages/s for ${seconds} s (RocketMQ client alone): ${latencies.length}/${sent} received; ` +
      `send → receive p50 ${percentile(latencies, 50).toFixed(1)} ms, p99 ${
        percentile(latencies, 99).toFixed(1)
      } ms, ` +
      `max ${Math.max(...latencies).toFixed(0)} ms; client CPU ${
        (cpuMs / Math.max(1, latencies.length)).toFixed(2)
      } ms per message (send and receive, in this process)`
  )
  console.log(stepLine("sent", samples))
}

/**
 * The dispatcher's queue_consume_lag_seconds buckets (le → cumulative count) and its receives (calls, messages: from
 * queue_receive_batch_size), each summed over its consumer groups.
 */
const dispatcherScrape = async (httpPort: number) => {
  const text = await (await fetch(`http://127.0.0.1:${httpPort}/metrics`)).text()
  const buckets = new Map<string, number>()
  for (const line of text.split("\n")) {
    if (!line.startsWith("queue_consume_lag_seconds_bucket{")) continue
    const le = /le="([^"]+)"/.exec(line)?.[1]
    if (le !== undefined) buckets.set(le, (buckets.get(le) ?? 0) + Number(line.slice(line.lastIndexOf(" ") + 1)))
  }
  return {
    buckets,
    receives: metricIn(text, "queue_receive_batch_size_count"),
    received: metricIn(text, "queue_receive_batch_size_sum")
  }
}
type DispatcherScrape = Awaited<ReturnType<typeof dispatcherScrape>>

/**
 * "send → dispatcher receive: ≤10 ms 40%, ≤50 ms 90%, …" for the deliveries between two scrapes, and how many
 * messages a receive brought (each receive is a round trip to the broker, an ack and a Redis pipeline).
 */
const consumeLagLine = (before: DispatcherScrape, after: DispatcherScrape) => {
  const delta = (le: string) => (after.buckets.get(le) ?? 0) - (before.buckets.get(le) ?? 0)
  const all = delta("+Inf")
  const receives = after.receives - before.receives
  return `  relay send → dispatcher receive (runner's queue_consume_lag_seconds, ${all} deliveries): ` +
    ["0.01", "0.05", "0.1", "0.25"].map((le) => `≤${Number(le) * 1000} ms ${(100 * delta(le) / all).toFixed(1)}%`)
      .join(", ") +
    `; ${((after.received - before.received) / Math.max(1, receives)).toFixed(1)} messages per receive`
}

const startRunner = (databaseUrl: string, runner: typeof RUNNERS[number]) =>
  startRunnerProcess({
    DATABASE_URL: databaseUrl,
    ROCKETMQ_ENDPOINTS: endpoints,
    ROCKETMQ_TOPIC: topic,
    DISPATCHER_GROUP: group,
    REDIS_URL: redisUrl,
    REDIS_KEY_PREFIX: prefix,
    INBOX_PROCESSOR_ENABLED: "false",
    ...(runner.roles === undefined ? {} : { RUNNER_ROLES: runner.roles })
  }, {
    nodeArgs: (process.env.BENCH_NODE_ARGS ?? "").split(" ").filter((a) => a.length > 0),
    ...(runner.readyPath === undefined ? {} : { readyPath: runner.readyPath })
  })

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
  execFileSync("scripts/rocketmq.sh", ["topic", ceilingTopic, ceilingGroup], { stdio: "inherit" })
  console.log(
    `\n== bench:propagation: outbox → RocketMQ → dispatcher → Redis (${
      PROCESSES === 1 ? "one runner process" : "two runner processes: the relay's and the dispatcher's"
    }) ==`
  )
  const sustained = PHASES.includes("sustained")
  const ceilingRate = sustained ? await ceiling(SECONDS) : NaN
  const admin = new pg.Client({ connectionString: adminUrl })
  await admin.connect()
  const database = await freshDatabase(admin, adminUrl, "bench_propagation")
  const runners: Array<{ readonly child: ChildProcess; readonly health: RunnerHealth }> = []
  /** the dispatcher's HTTP port (its queue_consume_lag_seconds) */
  let httpPort = 0
  const db = new pg.Client({ connectionString: database.url })
  const sub = new Redis(redisUrl)
  try {
    for (const r of RUNNERS) {
      const started = await startRunner(database.url, r)
      runners.push(started)
      httpPort = started.httpPort
    }
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

    if (sustained) await sustainedPhase()
    async function sustainedPhase() {
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
      console.log(
        `sustained: committed ${sent} events in ${commitSeconds.toFixed(1)} s (${
          (sent / commitSeconds).toFixed(0)
        }/s); ` +
          `delivered ${inPhase.length} to the Redis subscriber at ${deliveredRate.toFixed(0)} events/s ` +
          `(first commit → last delivery)`
      )
      // the machine is shared: the ceiling again right after, and the ratio to the mean of both
      const ceilingAfter = await ceiling(SECONDS)
      console.log(
        `sustained / ceiling: ${(100 * deliveredRate / ((ceilingRate + ceilingAfter) / 2)).toFixed(0)}% ` +
          `(ceiling before ${ceilingRate.toFixed(0)}/s, after ${ceilingAfter.toFixed(0)}/s)`
      )
    }

    // latency at the issue's 1,000 events/s, and at a rate below the sustained capacity
    for (const rate of PHASES.includes("latency") ? [1000, 500] : []) {
      // at every rate: the client's CPU per message falls as its receives fill (1.03 ms at 500/s, 0.62 at 1,000/s
      // here), so the runner's is read beside the client's at the same rate
      await ceilingLatency(rate, SECONDS)
      await sleep(5000)
      const lagBefore = await dispatcherScrape(httpPort)
      const cpuBefore = runners.map((r) => cpuSeconds(r.child.pid!))
      const latencyStart = seq
      const sent2 = await drive(db, rate, SECONDS, committedAt)
      const deadline2 = performance.now() + 90_000
      while (performance.now() < deadline2 && [...received.keys()].filter((s) => s > latencyStart).length < sent2) {
        await sleep(200)
      }
      const cpu = runners.map((r, i) => cpuSeconds(r.child.pid!) - cpuBefore[i]!)
      const samples = [...received.entries()].filter(([s]) => s > latencyStart).map(([s, at]) => {
        const committed = committedAt.get(s)!
        return [committed, at - committed] as const
      })
      const latencies = samples.map(([, latency]) => latency)
      console.log(
        `at ${rate} events/s for ${SECONDS} s: ${latencies.length}/${sent2} delivered; commit → Redis delivery ` +
          `p50 ${percentile(latencies, 50).toFixed(1)} ms, p99 ${percentile(latencies, 99).toFixed(1)} ms, ` +
          `max ${Math.max(...latencies).toFixed(0)} ms; runner CPU ${
            cpu.map((c) => `${(1000 * c / sent2).toFixed(2)} ms`).join(" + ")
          } per event`
      )
      console.log(stepLine("committed", samples))
      console.log(consumeLagLine(lagBefore, await dispatcherScrape(httpPort)))
    }
    console.log(healthLine(runners.map((r) => r.health.stop())))
  } finally {
    for (const r of runners) r.health.stop()
    sub.disconnect()
    await Promise.all(runners.map((r) => stopProcess(r.child, "SIGTERM")))
    await db.end().catch(() => undefined)
    await database.drop()
    await admin.end()
    for (const [t, g] of [[topic, group], [ceilingTopic, ceilingGroup]] as const) {
      execFileSync("scripts/rocketmq.sh", ["drop", t, g], { stdio: "inherit" })
    }
  }
}

main().then(() => process.exit(0), (e) => {
  console.error(e)
  process.exit(1)
})
