/**
 * npm run bench:create — what creating a task (POST /v1/projects/:id/tasks, one after another) costs the runner
 * processes, in CPU per create, beside its ceiling for the part that is the queue hop: the RocketMQ client alone
 * sending, receiving and acking as many messages at the same rate (each create's task.created event crosses RocketMQ
 * once: the relay sends it, the dispatcher receives and acks it).
 *
 * A fresh PostgreSQL database per layout. The tasks are Runway's with no provider reachable (EMBEDDED_SIMULATOR off):
 * they stay queued, their breaker open, and POLL_INTERVAL_SCALE=100 makes their looks at it rare (each queued task
 * otherwise looks every 4-6 s, ~1.4 ms of CPU each: 800 queued tasks took a fifth of a core), so the figure is the
 * creates' own. Layouts (BENCH_LAYOUTS, default "one,split"):
 *   one    one runner with every role;
 *   split  the dispatcher in a process of its own beside one with the other roles: the dispatcher's share apart.
 * Each process's CPU is read from /proc; its idle CPU (3 s before the rounds) is printed beside, not subtracted.
 *
 *   BENCH_CREATES (300 per round)  BENCH_ROUNDS (3; medians printed)  BENCH_LAYOUTS  DATABASE_URL (admin URL)
 *   ROCKETMQ_ENDPOINTS  REDIS_URL  BENCH_NODE_ARGS (node flags for the runners)
 */
import pg from "pg"
import { clientAtRate } from "./rocketmqCeiling.js"
import {
  bearerHeaders,
  cpuSeconds,
  freshDatabase,
  healthLine,
  median,
  sleep,
  startRunnerProcess,
  stopProcess
} from "./support.js"

const CREATES = Number(process.env.BENCH_CREATES ?? 300)
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3)
const LAYOUTS = (process.env.BENCH_LAYOUTS ?? "one,split").split(",").map((l) => l.trim())
const adminUrl = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres"
const endpoints = process.env.ROCKETMQ_ENDPOINTS
const SECRET = "create-bench-secret-0123456789abcdef"
const nodeArgs = (process.env.BENCH_NODE_ARGS ?? "").split(" ").filter((a) => a !== "")
const PROCESSES: Record<string, ReadonlyArray<string | undefined>> = {
  one: [undefined],
  split: ["api,entities,singletons,webhooks,gateway", "dispatcher"]
}

const main = async () => {
  if (endpoints === undefined) throw new Error("ROCKETMQ_ENDPOINTS: required (the create's event crosses RocketMQ)")
  const headers = await bearerHeaders(SECRET)
  const body = JSON.stringify({ provider: "runway", model: "gen4.5", prompt: "p", duration_seconds: 5 })
  const admin = new pg.Client({ connectionString: adminUrl })
  await admin.connect()
  const rates: Array<number> = []
  try {
    for (const layout of LAYOUTS) {
      const roles = PROCESSES[layout]
      if (roles === undefined) throw new Error(`BENCH_LAYOUTS: ${layout}: one or split`)
      const database = await freshDatabase(admin, adminUrl, "bench_create")
      const runners: Array<Awaited<ReturnType<typeof startRunnerProcess>>> = []
      try {
        for (const r of roles) {
          runners.push(
            await startRunnerProcess({
              DATABASE_URL: database.url,
              AUTH_SECRET: SECRET,
              POLL_INTERVAL_SCALE: "100",
              ...(r === undefined ? {} : { RUNNER_ROLES: r })
            }, { output: "ignore", nodeArgs, ...(r?.includes("api") === false ? { readyPath: "/readyz" } : {}) })
          )
        }
        const api = runners[0]!
        const names = roles.map((r) => r === undefined ? "the runner" : r.includes("api") ? "the rest" : r)
        const res = await fetch(`http://127.0.0.1:${api.httpPort}/v1/projects`, { method: "POST", headers })
        const project = ((await res.json()) as { project_id: string }).project_id
        const create = async () => {
          const answer = await fetch(`http://127.0.0.1:${api.httpPort}/v1/projects/${project}/tasks`, {
            method: "POST",
            headers: { ...headers, "idempotency-key": crypto.randomUUID() },
            body
          })
          if (answer.status !== 201) throw new Error(`create answered ${answer.status}: ${await answer.text()}`)
          await answer.arrayBuffer()
        }
        // warm: the first creates run cold code (a create on a fresh runner costs several times a warm one)
        for (let i = 0; i < CREATES; i++) await create()
        await sleep(2000)
        const idle0 = runners.map((r) => cpuSeconds(r.child.pid!))
        await sleep(3000)
        const idle = runners.map((r, i) => ((cpuSeconds(r.child.pid!) - idle0[i]!) * 1000) / 3)
        const perCreate: Array<Array<number>> = runners.map(() => [])
        const wall: Array<number> = []
        for (let round = 0; round < ROUNDS; round++) {
          const before = runners.map((r) => cpuSeconds(r.child.pid!))
          const t0 = performance.now()
          for (let i = 0; i < CREATES; i++) await create()
          const ms = performance.now() - t0
          await sleep(500) // the last events' propagation
          runners.forEach((r, i) => perCreate[i]!.push(((cpuSeconds(r.child.pid!) - before[i]!) * 1000) / CREATES))
          wall.push(ms / CREATES)
        }
        rates.push(1000 / median(wall))
        console.log(
          `${layout}: ${CREATES} creates one after another, ${ROUNDS} rounds: ${median(wall).toFixed(1)} ms each ` +
            `(${(1000 / median(wall)).toFixed(0)}/s); CPU per create: ${
              names.map((n, i) =>
                `${n} ${median(perCreate[i]!).toFixed(2)} ms (rounds ${
                  perCreate[i]!.map((x) => x.toFixed(1)).join(", ")
                }; idle ${idle[i]!.toFixed(0)} ms a second)`
              ).join(", ")
            }`
        )
        for (const r of runners) await stopProcess(r.child, "SIGTERM")
        console.log(healthLine(runners.map((r) => r.health.stop())))
      } finally {
        for (const r of runners) await stopProcess(r.child, "SIGKILL")
        await database.drop()
      }
    }
    // the ceiling of the queue hop, at the creates' rate: what the client alone spends on one message
    const rate = Math.round(median(rates))
    const suffix = Date.now().toString(36)
    const { cpuMs, samples } = await clientAtRate({
      endpoints,
      topic: `bench-create-ceiling-${suffix}`,
      group: `bench-create-ceiling-consumer-${suffix}`,
      rate,
      seconds: 15,
      receivers: 4,
      message: (n) => ({ body: JSON.stringify({ n, pad: "x".repeat(900) }), group: crypto.randomUUID() })
    })
    console.log(
      `ceiling (RocketMQ client alone, send + receive + ack, ${rate} messages/s for 15 s): ${
        (cpuMs / Math.max(1, samples.length)).toFixed(2)
      } ms of CPU per message (${samples.length} received)`
    )
  } finally {
    await admin.end()
  }
}

void main()
