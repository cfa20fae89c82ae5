/**
 * npm run bench:webhooks — validly signed Standard Webhooks callbacks (OpenAI's shape; 10% exact duplicates) on
 * loopback into real PostgreSQL, against webhook gateway processes (RUNNER_ROLES=webhooks, as README "Production"
 * deploys them; BENCH_ROLES=all runs every role, with INBOX_PROCESSOR_ENABLED=false) and, in the same
 * run, against its ceiling: a bare node:http server doing the same verification and the same grouped inbox insert
 * (bench/webhookCeiling.ts). They take turns (runner, ceiling, runner, ceiling ...) so both see the same machine;
 * the figures are medians over the rounds, and the ratio is the runner's over the ceiling's.
 *
 * Phases, each BENCH_SECONDS long, BENCH_ROUNDS times: closed loop on 1 process (BENCH_CONCURRENCY connections,
 * one request in flight each), closed loop on 2 processes (the same connections spread over both ports), and
 * an open loop at BENCH_RATE/s offered to 1 process (fixed schedule; latency counted from the scheduled time).
 * The load generator is a child process (bench/webhookLoad.mjs) with BENCH_LOAD_WORKERS threads; its CPU is
 * printed so a generator at 100% of a core is seen for what it is. CPU per webhook is the server processes'
 * user+system time over the 204s.
 *
 *   BENCH_SECONDS (5)  BENCH_ROUNDS (3)  BENCH_CONCURRENCY (64)  BENCH_RATE (1000)  BENCH_LOAD_WORKERS (1)
 *   BENCH_NODE_ARGS (node flags for the runners, e.g. --cpu-prof)  DATABASE_URL (admin URL; a fresh database)
 *   BENCH_ROLES (the runners' RUNNER_ROLES: "webhooks"; "all" for every role: their idle work, 2-7% of a core each
 *   here, counts in the CPU per webhook then)
 */
import { type ChildProcess, fork } from "node:child_process"
import pg from "pg"
import { bundle } from "../scripts/runBuilt.mjs"
import {
  cpuSeconds,
  freePort,
  freshDatabase,
  healthLine,
  median,
  percentile,
  startRunnerProcess,
  stopProcess
} from "./support.js"

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5)
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3)
const CONNECTIONS = Number(process.env.BENCH_CONCURRENCY ?? 64)
const RATE = Number(process.env.BENCH_RATE ?? 1000)
const LOAD_WORKERS = Number(process.env.BENCH_LOAD_WORKERS ?? 1)
const ROLES = process.env.BENCH_ROLES ?? "webhooks"
const nodeArgs = (process.env.BENCH_NODE_ARGS ?? "").split(" ").filter((a) => a.length > 0)
const adminUrl = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres"
const SECRET = "whsec_" + Buffer.from("bench-openai-secret-0123456789ab").toString("base64")

/** The ceiling as plain JavaScript, like the runner (scripts/runBuilt.mjs says why). */
let ceiling: Promise<string> | undefined
const ceilingProgram = () => ceiling ??= bundle("bench/webhookCeiling.ts")

/** INSERTs written so far, and the callbacks they carried. */
type Inserts = { readonly statements: number; readonly rows: number }

/** The runner's inbox group commits so far (its /metrics). */
const inboxBatches = async (port: number): Promise<Inserts> => {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text()
  const value = (name: string) => {
    const line = text.split("\n").find((l) => l.startsWith(`${name}{`) && l.includes(`writer="inbox"`))
    return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(" ") + 1))
  }
  return { statements: value("group_commit_batch_size_count"), rows: value("group_commit_batch_size_sum") }
}

/** The ceiling's INSERTs so far, and the callbacks they carried (its GET /stats). */
const ceilingBatches = async (port: number): Promise<Inserts> =>
  (await fetch(`http://127.0.0.1:${port}/stats`)).json() as Promise<Inserts>

interface LoadResult {
  readonly statuses: Record<string, number>
  readonly latencies: Array<number>
  readonly elapsed: number
  readonly late: number
}

const ready = (child: ChildProcess) =>
  new Promise<void>((resolve, reject) => {
    child.once("message", () => resolve())
    child.once("exit", (code) => reject(new Error(`child exited with ${code}`)))
  })

interface Phase {
  readonly accepted: number
  readonly p50: number
  readonly p99: number
  readonly cpuMsPerWebhook: number
  readonly loadCpu: number
  readonly late: number
  readonly statuses: Record<string, number>
  /** Callbacks per INSERT. */
  readonly batch: number
  /** The other runner's CPU (fraction of a core) while one took the load: what a runner costs with no webhooks. */
  readonly idleCpu: number | undefined
}

const main = async () => {
  const admin = new pg.Client({ connectionString: adminUrl })
  await admin.connect()
  const database = await freshDatabase(admin, adminUrl, "bench_webhooks")
  const children: Array<ChildProcess> = []
  const runners: Array<Awaited<ReturnType<typeof startRunnerProcess>>> = []
  try {
    const env = {
      DATABASE_URL: database.url,
      OPENAI_WEBHOOK_SECRET: SECRET,
      INBOX_PROCESSOR_ENABLED: "false",
      ...(ROLES === "all" ? {} : { RUNNER_ROLES: ROLES })
    }
    // one after the other: the first applies the migrations
    for (let i = 0; i < 2; i++) runners.push(await startRunnerProcess(env, { nodeArgs, readyPath: "/readyz" }))
    console.error("runners up")
    const ceilings: Array<{ child: ChildProcess; port: number }> = []
    for (let i = 0; i < 2; i++) {
      const port = await freePort()
      const child = fork(await ceilingProgram(), [], {
        execArgv: [],
        env: {
          ...process.env,
          HTTP_PORT: String(port),
          DATABASE_URL: database.url,
          OPENAI_WEBHOOK_SECRET: SECRET,
          // as many writers as the runners have
          WRITERS: process.env.INBOX_WRITE_PARALLELISM ?? "4"
        }
      })
      children.push(child)
      await ready(child)
      ceilings.push({ child, port })
    }
    const load = fork("bench/webhookLoad.mjs", [], { stdio: ["ignore", "inherit", "inherit", "ipc"] })
    children.push(load)
    await ready(load)
    console.error("ceilings and load generator up")

    let tags = 0
    const run = (spec: { mode: "closed" | "open"; ports: Array<number>; seconds: number }) =>
      new Promise<LoadResult>((resolve) => {
        load.once("message", (m: LoadResult) => resolve(m))
        load.send({
          type: "run",
          ...spec,
          connections: CONNECTIONS,
          rate: RATE,
          secret: SECRET,
          tag: `p${tags++}`,
          workers: LOAD_WORKERS
        })
      })
    const phase = async (
      mode: "closed" | "open",
      servers: ReadonlyArray<{ pid: number; port: number }>
    ): Promise<Phase> => {
      // the runner not under load in a 1-process phase: its own background work (shard locks, pollers, metrics)
      const idleRunner = runners.find((r) =>
        !servers.some((s) => s.port === r.httpPort) && runners[0]!.httpPort === servers[0]!.port
      )
      const idle0 = idleRunner === undefined ? 0 : cpuSeconds(idleRunner.child.pid!)
      const pids = [...servers.map((s) => s.pid), load.pid!]
      const isRunner = runners.some((r) => r.httpPort === servers[0]!.port)
      const batches = () => Promise.all(servers.map((s) => isRunner ? inboxBatches(s.port) : ceilingBatches(s.port)))
      const batches0 = await batches()
      const before = pids.map(cpuSeconds)
      const r = await run({ mode, ports: servers.map((s) => s.port), seconds: SECONDS })
      const used = pids.map((pid, i) => cpuSeconds(pid) - before[i]!)
      const idleCpu = idleRunner === undefined ? undefined : (cpuSeconds(idleRunner.child.pid!) - idle0) / r.elapsed
      const batches1 = await batches()
      const sum = (bs: ReadonlyArray<Inserts>, k: keyof Inserts) => bs.reduce((n, b) => n + b[k], 0)
      const serverCpu = used.slice(0, -1).reduce((a, b) => a + b, 0)
      const ok = r.latencies.length
      return {
        accepted: ok / r.elapsed,
        p50: percentile(r.latencies, 50),
        p99: percentile(r.latencies, 99),
        cpuMsPerWebhook: serverCpu * 1000 / Math.max(1, ok),
        loadCpu: used.at(-1)! / r.elapsed,
        late: r.late,
        statuses: r.statuses,
        idleCpu,
        batch: (sum(batches1, "rows") - sum(batches0, "rows")) /
          (sum(batches1, "statements") - sum(batches0, "statements"))
      }
    }
    const runner = (n: number) => runners.slice(0, n).map((r) => ({ pid: r.child.pid!, port: r.httpPort }))
    const ceiling = (n: number) => ceilings.slice(0, n).map((c) => ({ pid: c.child.pid!, port: c.port }))
    const line = (name: string, p: Phase) =>
      console.log(
        `  ${name.padEnd(12)} ${p.accepted.toFixed(0).padStart(5)}/s  p50 ${p.p50.toFixed(1)} ms  p99 ${
          p.p99.toFixed(1)
        } ms  CPU ${p.cpuMsPerWebhook.toFixed(2)} ms/webhook  load generator ${
          (p.loadCpu * 100).toFixed(0)
        }% of a core  ${p.batch.toFixed(1)} callbacks/INSERT${
          p.idleCpu === undefined ? "" : `  (idle runner ${(p.idleCpu * 100).toFixed(0)}% of a core)`
        }${p.late > 0 ? `  unanswered ${p.late}` : ""}  ${JSON.stringify(p.statuses)}`
      )

    // warm-up (JIT, pools), not recorded
    for (const s of [...runner(2), ...ceiling(2)]) {
      const w = await run({ mode: "closed", ports: [s.port], seconds: 2 })
      console.error(`warm-up :${s.port} ${JSON.stringify(w.statuses)}`)
    }

    const cases = [
      ["runner ×1", "closed", runner(1)],
      ["ceiling ×1", "closed", ceiling(1)],
      ["runner ×2", "closed", runner(2)],
      ["ceiling ×2", "closed", ceiling(2)],
      [`runner @${RATE}/s`, "open", runner(1)],
      [`ceiling @${RATE}/s`, "open", ceiling(1)]
    ] as const
    const results = new Map<string, Array<Phase>>(cases.map(([name]) => [name, []]))
    console.log(
      `webhooks: ${SECONDS} s phases, ${ROUNDS} rounds, ${CONNECTIONS} connections, load generator ${LOAD_WORKERS} thread(s)`
    )
    for (let round = 1; round <= ROUNDS; round++) {
      console.log(`round ${round}`)
      for (const [name, mode, servers] of cases) {
        const p = await phase(mode, servers)
        results.get(name)!.push(p)
        line(name, p)
      }
    }
    const med = (name: string, f: (p: Phase) => number) => median(results.get(name)!.map(f))
    const ratio = (a: string, b: string) => {
      const as = results.get(a)!
      const bs = results.get(b)!
      return median(as.map((p, i) => p.accepted / bs[i]!.accepted))
    }
    console.log(`medians of ${ROUNDS}:`)
    for (const [name] of cases) {
      console.log(
        `  ${name.padEnd(18)} ${med(name, (p) => p.accepted).toFixed(0).padStart(5)}/s  p99 ${
          med(name, (p) => p.p99).toFixed(1)
        } ms  CPU ${med(name, (p) => p.cpuMsPerWebhook).toFixed(3)} ms/webhook  load generator ${
          (med(name, (p) => p.loadCpu) * 100).toFixed(0)
        }%  ${med(name, (p) => p.batch).toFixed(1)} callbacks/INSERT`
      )
    }
    console.log(`runner / ceiling, 1 process: ${(ratio("runner ×1", "ceiling ×1") * 100).toFixed(0)}% (goal ≥ 70%)`)
    console.log(`runner / ceiling, 2 processes: ${(ratio("runner ×2", "ceiling ×2") * 100).toFixed(0)}%`)
    console.log(
      `2 processes / 1: runner ${ratio("runner ×2", "runner ×1").toFixed(2)}× (goal ≥ 1.5×), ceiling ${
        ratio("ceiling ×2", "ceiling ×1").toFixed(2)
      }×`
    )
    console.log(
      `p99 at ${RATE}/s offered: runner ${
        med(`runner @${RATE}/s`, (p) => p.p99).toFixed(1)
      } ms (goal ≤ 50 ms), ceiling ${med(`ceiling @${RATE}/s`, (p) => p.p99).toFixed(1)} ms`
    )
    const rows = await new pg.Client({ connectionString: database.url })
    await rows.connect()
    const stored = (await rows.query("SELECT count(*)::int AS n FROM provider_callback_inbox")).rows[0].n
    await rows.end()
    console.log(`inbox rows: ${stored}`)
    console.log(healthLine(runners.map((r) => r.health.stop())))
  } finally {
    for (const c of children) c.kill("SIGTERM")
    await Promise.all(runners.map((r) => stopProcess(r.child, "SIGTERM")))
    await database.drop()
    await admin.end()
  }
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
