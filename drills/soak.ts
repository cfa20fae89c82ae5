/**
 * npm run soak -- [--minutes 10]: the whole system under combined faults, on service instances of its own (a
 * PostgreSQL cluster, a Redis and a RocketMQ on their own ports and folders), two runner processes behind nginx, and
 * the simulator injecting duplicates 30%, dropped webhooks 20%, reordering, 429/5xx on 10% of polls, lost submit
 * responses 2% and provider failures 5%. Browser-like SSE clients drop their connection at random and resume with
 * Last-Event-ID. Meanwhile a runner is SIGKILLed every 20 s and restarted, and Redis, RocketMQ and PostgreSQL are each
 * restarted once. Then it waits for every task to end and checks: every task terminal and equal to the provider's
 * truth, no job submitted twice, the ledger balanced per task, no event missing or repeated at any client, every
 * callback the platform acknowledged in its inbox. Prints a summary, writes drills/soak.svg, exits 1 on a violation.
 *   SOAK_RATE (tasks/s, 1)  SOAK_CLIENTS (4)  SOAK_KILL_EVERY_S (20)  DRILL_VERBOSE=1
 */
import * as fs from "node:fs"
import * as http from "node:http"
import { parseArgs } from "node:util"
import { percentile, sleep } from "../bench/support.js"
import { checkInvariants, describeInvariants, violations } from "./invariants.js"
import { ownPostgres, ownRedis, ownRocketMQ } from "./services.js"
import { soakChart } from "./soakChart.js"
import { log, openStage, PROVIDERS, request, sseFrames, type Stage, waitFor } from "./stage.js"

const { values } = parseArgs({ options: { minutes: { type: "string", default: "10" } } })
const MINUTES = Number(values.minutes)
if (!(MINUTES > 0)) {
  console.error(`--minutes must be a positive number (got ${values.minutes})`)
  process.exit(2)
}
const RATE = Number(process.env.SOAK_RATE ?? 1)
const CLIENTS = Number(process.env.SOAK_CLIENTS ?? 4)
const KILL_EVERY_MS = Number(process.env.SOAK_KILL_EVERY_S ?? 20) * 1000
const DURATION_MS = MINUTES * 60_000

/** What happened when: kills, restarts (for the chart and the summary). */
const marks: Array<{ at: number; what: string }> = []
let t0 = performance.now()
let startEpoch = Date.now()
const mark = (what: string) => {
  marks.push({ at: performance.now() - t0, what })
  log(what)
}

interface Client {
  readonly received: Array<{ cursor: string; at: number }>
  /** The snapshot's cursor the client began from: it must see every event after it. */
  first: string | undefined
  reconnects: number
  /** Explicit resets (reason, the cursor it held, the cursor it was given): none is expected in a soak. */
  readonly resets: Array<{ reason: string; from: string | undefined; to: string | undefined }>
  /** Each connection: when (ms since the soak began), the Last-Event-ID it sent, the answer's status. */
  readonly connections: Array<{ at: number; after: string | undefined; status: number | string }>
  stop: () => void
}

const seqOf = (cursor: string | undefined) => (cursor === undefined ? -1 : Number(cursor.split("-").at(-1)))

/**
 * A browser-like client: reads a snapshot for its cursor, follows the project's stream from there, drops its
 * connection at random, and resumes by Last-Event-ID.
 */
const sseClient = async (stage: Stage): Promise<Client> => {
  const client: Client = {
    received: [],
    first: undefined,
    reconnects: 0,
    resets: [],
    connections: [],
    stop: () => undefined
  }
  // the snapshot (retried: a runner may be down): its cursor is where this client's stream begins
  await waitFor("a snapshot for an SSE client", async () => {
    const page = await request(`${stage.platform}/v1/projects/${stage.project}/tasks?limit=1`, { token: stage.token })
    if (page.status !== 200) return false
    client.first = (page.body as { cursor: string }).cursor
    return true
  }, 60_000)
  let stopped = false
  let last = client.first
  let current: http.ClientRequest | undefined
  const connect = () => {
    if (stopped) return
    const headers: Record<string, string> = { accept: "text/event-stream", authorization: `Bearer ${stage.token}` }
    if (last !== undefined) headers["last-event-id"] = last
    const url = `${stage.platform}/v1/projects/${stage.project}/events`
    const connection: Client["connections"][number] = { at: performance.now() - t0, after: last, status: "no answer" }
    client.connections.push(connection)
    const req = http.get(url, { headers }, (res) => {
      connection.status = res.statusCode ?? "?"
      sseFrames(res, (frame) => {
        if (frame.event === "reset") {
          // the cursor cannot be served: a real client takes a new snapshot and goes on from the cursor given
          const reason = (JSON.parse(frame.data) as { reason?: string }).reason ?? "?"
          client.resets.push({ reason, from: last, to: frame.id })
          last = frame.id
        }
        if (frame.id !== undefined && frame.event === "task.status") {
          last = frame.id
          client.received.push({ cursor: frame.id, at: Date.now() })
        }
      })
      res.on("end", () => again())
      res.on("error", () => again())
    })
    req.on("error", (e) => {
      connection.status = e.message.slice(0, 40)
      again()
    })
    current = req
  }
  let pending = false
  const again = () => {
    if (stopped || pending) return
    pending = true
    setTimeout(() => {
      pending = false
      client.reconnects++
      connect()
    }, 200 + Math.random() * 800)
  }
  // the random drop: a browser tab that loses its network
  const dropper = setInterval(() => {
    if (Math.random() < 0.3) current?.destroy()
  }, 5_000)
  client.stop = () => {
    stopped = true
    clearInterval(dropper)
    current?.destroy()
  }
  connect()
  return client
}

/** Failed creation tries per 10 s of the soak, by status (0: no answer within 10 s): where admissions struggled. */
const triesOverTime = (tries: ReadonlyArray<{ readonly at: number; readonly status: number }>) => {
  const bins = new Map<number, Map<number, number>>()
  for (const t of tries) {
    const bin = Math.floor((t.at - startEpoch) / 10_000) * 10
    const byStatus = bins.get(bin) ?? new Map<number, number>()
    byStatus.set(t.status, (byStatus.get(t.status) ?? 0) + 1)
    bins.set(bin, byStatus)
  }
  return [...bins].sort(([a], [b]) => a - b)
    .map(([bin, byStatus]) => `${bin} s: ${[...byStatus].map(([st, n]) => `${n}×${st}`).join(" ")}`)
    .join("; ") || "none"
}

const main = async () => {
  log(`soak: ${MINUTES} min, ${RATE} tasks/s, ${CLIENTS} SSE clients, a runner killed every ${KILL_EVERY_MS / 1000} s`)
  const [pgInstance, redis] = await Promise.all([ownPostgres("soak"), ownRedis()])
  const mq = await ownRocketMQ("soak")
  log(`own services: PostgreSQL :${pgInstance.port}, Redis :${redis.port}, RocketMQ ${mq.endpoints}`)
  let stage: Stage | undefined
  const problems: Array<string> = []
  try {
    stage = await openStage({
      name: "soak",
      adminUrl: pgInstance.adminUrl,
      redisUrl: redis.url,
      rocketmqEndpoints: mq.endpoints,
      nginx: true,
      env: { DB_CONNECT_TIMEOUT: "5 seconds" }
    })
    const s = stage
    await s.faults({
      jobDurationMs: 15_000,
      queuedShare: 0.2,
      duplicateWebhooks: 0.3,
      dropWebhooks: 0.2,
      reorderWindowMs: 2_000,
      rate429: 0.05,
      rate5xx: 0.05,
      submitAcceptThenTimeout: 0.02,
      outcomes: { succeeded: 0.95, failed: 0.05, canceled: 0 },
      progressEveryMs: 3_000
    })
    t0 = performance.now()
    startEpoch = Date.now()
    mark("faults begin")
    const clients = await Promise.all(Array.from({ length: CLIENTS }, () => sseClient(s)))
    const ids: Array<string> = []
    const created: Array<number> = []
    let generating = true
    let refused = 0
    const refusals = new Map<string, number>()
    const generator = (async () => {
      let i = 0
      const started = performance.now()
      while (generating) {
        const due = started + (i * 1000) / RATE
        if (performance.now() < due) await sleep(due - performance.now())
        const provider = PROVIDERS[i++ % PROVIDERS.length]!
        void s.createTask(provider).then((id) => {
          ids.push(id)
          created.push(performance.now() - t0)
        }, (e) => {
          refused++
          const why = String(e).replace(/"trace_id":"[0-9a-f]+"/, "").slice(0, 120)
          refusals.set(why, (refusals.get(why) ?? 0) + 1)
        })
      }
    })()

    // the faults: runner kills on their own clock, the three service restarts on theirs
    let killed = 0
    const over = () => performance.now() - t0 >= DURATION_MS
    const kills = (async () => {
      for (let next = KILL_EVERY_MS; !over(); next += KILL_EVERY_MS) {
        while (performance.now() - t0 < next && !over()) await sleep(250)
        if (over()) break
        const victim = s.runners[killed++ % s.runners.length]!
        mark(`SIGKILL runner ${victim.name}`)
        await s.stop(victim, "SIGKILL")
        // as a supervisor does: a runner that did not come up (a machine loaded past its limits) is started again
        await s.start(victim).catch(async (e) => {
          mark(`runner ${victim.name} did not start (${String(e)}): starting it again`)
          await s.start(victim)
        })
        mark(`runner ${victim.name} back`)
      }
    })()
    const restarts = (async () => {
      const schedule: Array<[number, string, () => Promise<void>]> = [
        [0.3, "redis", async () => {
          await redis.stop()
          await sleep(2_000)
          await redis.start()
        }],
        [0.5, "rocketmq", async () => {
          await mq.stop()
          await mq.start()
        }],
        [0.7, "postgres", async () => {
          pgInstance.stop("fast")
          await pgInstance.start()
        }]
      ]
      for (const [share, what, restart] of schedule) {
        while (performance.now() - t0 < DURATION_MS * share) await sleep(250)
        mark(`restart ${what}`)
        await restart()
        mark(`${what} back`)
      }
    })()
    const faults = Promise.all([kills, restarts])
    await faults
    generating = false
    await generator
    const lastFault = performance.now()
    mark(`faults over: ${ids.length} tasks admitted (${refused} refused after retries); waiting for every task to end`)
    await s.faults({ dropWebhooks: 0, rate429: 0, rate5xx: 0 })
    const converged = await waitFor(
      "every task terminal",
      async () => (await s.terminalCount(ids)) === ids.length,
      600_000
    ).catch(async (e) => {
      problems.push(String(e))
      // what each runner serves beside the shard locks held, by session: a lock no runner serves leaves tasks stuck
      const locks = (await s.db.query(
        `SELECT pid, count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND granted GROUP BY pid`
      ).catch(() => ({ rows: [] }))).rows
      for (const r of s.runners) {
        const shards = await s.metric(r, "effect_cluster_shards").catch(() => NaN)
        log(`runner ${r.name}: serves ${shards} shards`)
      }
      log(`advisory locks by session: ${JSON.stringify(locks)}`)
      return performance.now() - lastFault
    })
    mark(`converged ${(converged / 1000).toFixed(0)} s after the last fault`)

    // every stored event reached every client once
    const stored = (await s.db.query(
      `SELECT cursor_seq::text AS seq, stream_epoch::text AS epoch, extract(epoch FROM created_at) * 1000 AS at
       FROM task_events WHERE project_id = $1 ORDER BY cursor_seq`,
      [s.project]
    )).rows as Array<{ seq: string; epoch: string; at: number }>
    const lastStored = stored.at(-1)
    // the tail may still be on its way (a client reconnecting, a gateway catching up): wait for it, then judge
    const lastCursor = lastStored === undefined ? undefined : `${lastStored.epoch}-${lastStored.seq}`
    await waitFor(
      "every client has the last event",
      () => lastCursor === undefined || clients.every((c) => c.received.some((r) => r.cursor === lastCursor)),
      300_000
    )
      .catch((e) => log(String(e)))
    clients.forEach((c) => c.stop())
    const committedAt = new Map(stored.map((e) => [`${e.epoch}-${e.seq}`, Number(e.at)]))
    let gaps = 0
    let repeats = 0
    const latencies: Array<{ at: number; ms: number }> = []
    clients.forEach((c, i) => {
      const got = new Set(c.received.map((r) => r.cursor))
      repeats += c.received.length - got.size
      // every stored event after the client's first cursor, except those an explicit reset told it to skip
      const skipped = (seq: number) => c.resets.some((r) => seq > seqOf(r.from) && seq <= seqOf(r.to))
      const missing = stored.filter((e) =>
        Number(e.seq) > seqOf(c.first) && !got.has(`${e.epoch}-${e.seq}`) && !skipped(Number(e.seq))
      )
      gaps += missing.length
      for (const e of missing.slice(0, 5)) {
        const at = Number(e.at) - startEpoch
        const around = c.connections.filter((k) => Math.abs(k.at - at) < 15_000)
          .map((k) => `${(k.at / 1000).toFixed(1)} s after ${k.after} → ${k.status}`)
        log(
          `client ${i} missed ${e.epoch}-${e.seq} (committed at ${(at / 1000).toFixed(1)} s); its connections near:` +
            ` ${around.join("; ") || "none"}`
        )
      }
      for (const r of c.resets) log(`client ${i} reset (${r.reason}) at cursor ${r.from}, given ${r.to}`)
      for (const r of c.received) {
        const at = committedAt.get(r.cursor)
        if (at !== undefined) latencies.push({ at: at - startEpoch, ms: r.at - at })
      }
    })
    const resets = clients.reduce((n, c) => n + c.resets.length, 0)
    const acked = (await request(`${s.sim}/_sim/acked`)).body as Array<string>
    const inbox = new Set(
      (await s.db.query(`SELECT provider || ' ' || encode(payload_hash, 'hex') AS k FROM provider_callback_inbox`)).rows
        .map((r) => r.k)
    )
    const lostCallbacks = acked.filter((k) => !inbox.has(k)).length
    const inv = await checkInvariants(s.db, s.sim, ids)
    const counts = (await request(`${s.sim}/_sim/counts`)).body as Record<string, number>

    if (violations(inv) > 0) problems.push(describeInvariants(inv))
    if (gaps > 0) problems.push(`${gaps} events missing at clients`)
    if (repeats > 0) problems.push(`${repeats} events repeated at clients`)
    if (resets > 0) problems.push(`${resets} resets at clients (no cursor should become unservable in a soak)`)
    if (lostCallbacks > 0) problems.push(`${lostCallbacks} acknowledged callbacks not in the inbox`)
    if (ids.length === 0) problems.push("no task was admitted")

    let freedLocks = 0
    for (const r of s.runners) freedLocks += await s.metric(r, "cluster_shard_locks_orphaned_total").catch(() => 0)
    const during = latencies.filter((l) => l.at <= DURATION_MS).map((l) => l.ms)
    const rows = [
      ["duration", `${MINUTES} min of faults + ${(converged / 1000).toFixed(0)} s to converge`],
      ["tasks", `${ids.length} admitted (${refused} refused after 10 retries), ${inv.tasks - inv.stuck} terminal`],
      ["refusals (after 10 tries)", [...refusals].map(([why, n]) => `${n}× ${why}`).join("; ") || "none"],
      ["failed tries over time (10 s bins, from the start)", triesOverTime(s.failedTries)],
      ["faults (s from the start)", marks.map((m) => `${(m.at / 1000).toFixed(0)} ${m.what}`).join("; ")],
      ["kills", `${killed} SIGKILLs of a runner (every ${KILL_EVERY_MS / 1000} s), each restarted`],
      ["restarts", marks.filter((m) => m.what.startsWith("restart ")).map((m) => m.what.slice(8)).join(", ")],
      [
        "simulator",
        `${counts.webhooksSent} webhooks sent, ${counts.webhooksDropped} dropped, ${counts.webhooksDuplicated} duplicated, ${counts.throttled} polls throttled`
      ],
      ["convergence after the last fault", `${(converged / 1000).toFixed(1)} s`],
      [
        "commit → client p50 / p99 during faults",
        `${percentile(during, 50).toFixed(0)} / ${percentile(during, 99).toFixed(0)} ms (${during.length} deliveries)`
      ],
      ["stuck tasks", String(inv.stuck)],
      ["tasks not equal to the provider's truth", String(inv.wrong)],
      ["duplicate submissions (simulator)", String(inv.duplicateSubmissions)],
      ["ledger differences (duplicate charges)", String(inv.ledgerDiffs)],
      ["event gaps in PostgreSQL", String(inv.eventGaps)],
      [
        "client gaps / repeats",
        `${gaps} / ${repeats} over ${clients.length} clients (${
          clients.reduce((n, c) => n + c.reconnects, 0)
        } reconnects, ${resets} resets)`
      ],
      ["acknowledged callbacks lost", `${lostCallbacks} of ${acked.length}`],
      [
        "shard locks freed by the audit (the runners' last processes)",
        String(freedLocks)
      ]
    ]
    console.log(`\n| soak | |\n|---|---|\n${rows.map(([k, v]) => `| ${k} | ${v} |`).join("\n")}`)
    fs.writeFileSync("drills/soak.svg", soakChart({ durationMs: DURATION_MS + converged, created, latencies, marks }))
    console.log("chart: drills/soak.svg")
  } finally {
    await stage?.close().catch(() => undefined)
    await mq.remove()
    await redis.stop()
    pgInstance.remove()
  }
  if (problems.length > 0) {
    console.error(`\nsoak FAILED:\n- ${problems.join("\n- ")}`)
    return 1
  }
  console.log("\nsoak passed: every invariant at 0")
  return 0
}

main().then((code) => process.exit(code), (e) => {
  console.error(e)
  process.exit(1)
})
