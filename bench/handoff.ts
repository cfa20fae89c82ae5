/**
 * npm run bench:handoff — how long tasks are unavailable when a runner dies (kill -9) or stops (SIGTERM).
 * Two runner processes on one fresh PostgreSQL database with the default shard settings; N tasks; one
 * runner is stopped; from the signal on, as clients that keep asking would, every task is asked through the other
 * runner (a cancel, which goes through the task's entity) until it answers. Recovery = the signal → the last task
 * answering. (Until stop 28 the asking began only once the stopped runner had exited, which added its exit time.)
 * Its ceiling, in the same round: as many other tasks, asked the same way just before the signal, with nobody
 * stopped. That is what the asks cost by themselves; the difference is what the handoff adds. Both runners are warmed
 * first (BENCH_WARMUP): a runner that has served a while runs the asks' code compiled, a fresh one cold, and until
 * stop 32 this bench measured fresh runners: cold code made most of its figures (the same 60 asks with nobody stopped
 * took 0.79–0.89 s fresh, 0.27–0.48 s warmed).
 *
 *   BENCH_TASKS (60)  BENCH_ROUNDS (1; medians of the rounds are printed)  DATABASE_URL (admin URL)
 *   BENCH_WARMUP (10)  how many times 60 other tasks are asked through each runner before the rounds' asks
 *   BENCH_WARMUP_FIRSTS (4)  then how many times 60 new tasks are asked (each one's first cancel) through the survivor
 *   BENCH_SIGNALS (SIGKILL,SIGTERM)  which stops each round measures
 *   BENCH_NODE_ARGS  node flags for both runners (e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof": a profile per pid)
 *   BENCH_RUNNER_OUTPUT=inherit  the runners' output (LOG_LEVEL=ERROR unless BENCH_RUNNER_ENV says otherwise) shown
 *   BENCH_RUNNER_ENV  extra settings for both runners, `NAME=value,NAME=value` (e.g. SHARD_LOCK_EXPIRATION=3 seconds)
 */
import type { ChildProcess } from "node:child_process"
import pg from "pg"
import {
  bearerHeaders,
  freshDatabase,
  gauge,
  healthLine,
  percentile,
  sleep,
  startRunnerProcess,
  stopProcess
} from "./support.js"

const TASKS = Number(process.env.BENCH_TASKS ?? 60)
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 1)
const WARMUP_ROUNDS = Number(process.env.BENCH_WARMUP ?? 10)
const WARMUP_FIRSTS = Number(process.env.BENCH_WARMUP_FIRSTS ?? 4)
const SIGNALS = (process.env.BENCH_SIGNALS ?? "SIGKILL,SIGTERM").split(",").map((s) => s.trim())
  .filter((s): s is "SIGKILL" | "SIGTERM" => s === "SIGKILL" || s === "SIGTERM")
const runnerEnv: Record<string, string> = Object.fromEntries(
  (process.env.BENCH_RUNNER_ENV ?? "").split(",").filter((kv) => kv.includes("=")).map((kv) => {
    const at = kv.indexOf("=")
    return [kv.slice(0, at).trim(), kv.slice(at + 1).trim()]
  })
)
const adminUrl = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres"
const SECRET = "handoff-bench-secret-0123456789abcdef"

const nodeArgs = (process.env.BENCH_NODE_ARGS ?? "").split(" ").filter((a) => a !== "")

const startRunner = (url: string) =>
  // no load balancer here to wait for: READINESS_GRACE (the stopped runner keeps its shards while /readyz says 503)
  // would only add its 2 s to the SIGTERM figure, which measures the handover
  startRunnerProcess({ DATABASE_URL: url, AUTH_SECRET: SECRET, READINESS_GRACE: "0 seconds", ...runnerEnv }, {
    output: process.env.BENCH_RUNNER_OUTPUT === "inherit" ? "inherit" : "ignore",
    nodeArgs
  })

const stop = stopProcess
const signalName = (signal: "SIGKILL" | "SIGTERM") => signal === "SIGKILL" ? "kill -9" : "SIGTERM"

/**
 * Cancels every task through the runner on `port` until its entity answers (202, or 409: no longer cancelable),
 * asking again 100 ms after a failure or a 15 s silence; the answers' times since `t0`, in seconds.
 */
const askUntilAnswered = async (
  port: number,
  project: string,
  ids: ReadonlyArray<string>,
  headers: Record<string, string>,
  t0: number
) => {
  return Promise.all(ids.map(async (id) => {
    for (;;) {
      try {
        const res = await fetch(`http://127.0.0.1:${port}/v1/projects/${project}/tasks/${id}/cancel`, {
          method: "POST",
          headers,
          signal: AbortSignal.timeout(15_000)
        })
        if (res.status === 202 || res.status === 409) return (performance.now() - t0) / 1000
      } catch {
        // timed out: ask again
      }
      await sleep(100)
    }
  }))
}

/** `n` tasks created one after another through the runner on `port`; their ids. */
const createTasks = async (port: number, project: string, n: number, headers: Record<string, string>) => {
  const ids: Array<string> = []
  for (let i = 0; i < n; i++) {
    const res = await fetch(`http://127.0.0.1:${port}/v1/projects/${project}/tasks`, {
      method: "POST",
      headers: { ...headers, "idempotency-key": crypto.randomUUID() },
      body: JSON.stringify({ provider: "runway", model: "gen4.5", prompt: "p", duration_seconds: 5 })
    })
    ids.push(((await res.json()) as { task_id: string }).task_id)
  }
  return ids
}

const main = async () => {
  const headers = await bearerHeaders(SECRET)
  const admin = new pg.Client({ connectionString: adminUrl })
  await admin.connect()
  const database = await freshDatabase(admin, adminUrl, "bench_handoff")
  const runners: Array<ChildProcess> = []
  let project: string | undefined
  const lastAnswer = { SIGKILL: [] as Array<number>, SIGTERM: [] as Array<number> }
  const unstopped = { SIGKILL: [] as Array<number>, SIGTERM: [] as Array<number> }
  try {
    for (let round = 0; round < ROUNDS; round++) {
      for (const signal of SIGNALS) {
        const a = await startRunner(database.url)
        const b = await startRunner(database.url)
        runners.push(a.child, b.child)
        await sleep(8000) // shards spread over both runners
        if (project === undefined) {
          const res = await fetch(`http://127.0.0.1:${b.httpPort}/v1/projects`, { method: "POST", headers })
          project = ((await res.json()) as { project_id: string }).project_id
        }
        // warm: a runner that has served a while runs the asks' code compiled; a fresh one runs it cold (measured here:
        // a cancel ~9 ms of runner CPU on a fresh runner; a GET of a task ~4 ms fresh, ~1.7 ms after 3,000 of them),
        // which would be measured instead of the handoff. The same tasks asked again and again (a second cancel
        // answers 409, through the entity too): few entities are added, and the stopped runner's shutdown stops each
        // of its entities (~0.5 ms each: bench:entity-stop)
        const warm = await createTasks(b.httpPort, project!, TASKS, headers)
        for (let i = 0; i < WARMUP_ROUNDS; i++) {
          await askUntilAnswered(a.httpPort, project!, warm, headers, performance.now())
          await askUntilAnswered(b.httpPort, project!, warm, headers, performance.now())
        }
        // and the asks' own answer, a first cancel (202: a commit, its event's propagation, the task ended), which
        // the rounds above run once per task only: measured here, 60 first cancels through a runner took 0.9 s the
        // first time, 0.53 s the second and 0.20-0.26 s from the third on (3-4 ms of runner CPU each), so the
        // ceiling and the handoff below were both mostly that code's first runs
        for (let i = 0; i < WARMUP_FIRSTS; i++) {
          await askUntilAnswered(
            a.httpPort,
            project!,
            await createTasks(b.httpPort, project!, TASKS, headers),
            headers,
            0
          )
        }
        // twice the tasks: the first half is asked with nobody stopped (the same asks' own cost, the ceiling),
        // the second half from the signal on
        const ids = await createTasks(b.httpPort, project!, 2 * TASKS, headers)
        const asked = ids.slice(0, TASKS)
        const handedOver = ids.slice(TASKS)
        const baseline = await askUntilAnswered(a.httpPort, project, asked, headers, performance.now())
        await sleep(2000) // the baseline's tail (outbox, relay) done before the signal
        // its shutdown stops each of its entities before it lets its shards go (~0.5 ms each: bench:entity-stop)
        const held = await gauge([b.httpPort], "effect_cluster_entities")
        const t0 = performance.now()
        let exited = 0
        const stopped = stop(b.child, signal).then(() => void (exited = (performance.now() - t0) / 1000))
        const answeredAt = await askUntilAnswered(a.httpPort, project, handedOver, headers, t0)
        await stopped
        const last = percentile(answeredAt, 100)
        const ceiling = percentile(baseline, 100)
        lastAnswer[signal].push(last)
        unstopped[signal].push(ceiling)
        console.log(
          `${signalName(signal)}: ${TASKS} tasks, every one answered on the survivor after first ${
            percentile(answeredAt, 0).toFixed(2)
          } s, p50 ${percentile(answeredAt, 50).toFixed(2)} s, max ${last.toFixed(2)} s (asked from the signal ` +
            `on; the stopped runner, which held ${held} entities, exited after ${exited.toFixed(2)} s; the first ` +
            `answers are tasks the survivor already held). The same asks with nobody stopped: p50 ${
              percentile(baseline, 50).toFixed(2)
            } s, max ${ceiling.toFixed(2)} s: the handoff adds ${(last - ceiling).toFixed(2)} s (ratio ${
              (last / ceiling).toFixed(2)
            })`
        )
        await stop(a.child, "SIGTERM")
        // runner 1 survives, runner 2 is stopped: a loss on runner 1 is a self-inflicted failover
        console.log(healthLine([a.health.stop(), b.health.stop()]))
      }
    }
    for (const signal of SIGNALS) {
      const last = percentile(lastAnswer[signal], 50)
      const ceiling = percentile(unstopped[signal], 50)
      console.log(
        `${signalName(signal)}: last task answered after ${last.toFixed(2)} s (median of ${ROUNDS}; each: ${
          lastAnswer[signal].map((x) => x.toFixed(2)).join(", ")
        } s); the same asks with nobody stopped ${ceiling.toFixed(2)} s: the handoff adds ${
          (last - ceiling).toFixed(2)
        } s (ratio ${(last / ceiling).toFixed(2)})`
      )
    }
  } finally {
    for (const r of runners) await stop(r, "SIGKILL")
    await database.drop()
    await admin.end()
  }
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
