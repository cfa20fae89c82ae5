/**
 * BENCH_PROCESSES=2 npm run bench:transitions — the entity path across processes: the same observations as
 * bench:transitions, sent by this process as a cluster client (RUNNER_ROLES=api: it hosts no shards) to task entities
 * hosted by runner processes (`npm start`'s program with every role, the in-process queue and
 * bus), first by one runner, then by two (the second joins and takes half the shards). Each message crosses
 * the cluster's runner sockets, as in a deployment where the webhook gateways and the entities are different processes.
 *
 * The runners run their real lifecycle, so the tasks are put in flight first (submitted, the provider's job known, the
 * next poll an hour away: their lifecycles park them) and each is sent a webhook's "running" 5..95 (19 changes), as
 * BENCH_LIFECYCLE=parked does in process. Prints per round and as medians, for 1 and for N runner processes:
 * transitions/s, p50 / p99, the runners' CPU and this client's CPU per transition, and the ratio N / 1.
 *
 *   BENCH_PROCESSES (2)  BENCH_TASKS (200)  BENCH_ROUNDS (3)  DATABASE_URL (admin URL; a fresh database is made)
 *   BENCH_WARMUP (1)  unmeasured rounds before each setup's (a new runner runs the path's code cold at first)
 *   BENCH_NODE_ARGS (node flags for the runners, e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof")
 */
import { Effect, Exit, Logger, LogLevel } from "effect"
import pg from "pg"
import { TaskClient } from "../src/entities/TaskClient.js"
import { admitMany, type BenchTask, inFlight, observationsOf, parkedWalk } from "./benchTasks.js"
import { inProcessRunner } from "./inProcessRunner.js"
import {
  cpuSeconds,
  gauge,
  healthLine,
  median,
  ownCpuMsSince,
  percentile,
  sleep,
  startRunnerProcess,
  stopProcess
} from "./support.js"

const PROCESSES = Number(process.env.BENCH_PROCESSES ?? 2)
const TASKS = Number(process.env.BENCH_TASKS ?? 200)
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3)
const WARMUP = Number(process.env.BENCH_WARMUP ?? 1)
const adminUrl = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres"
const SHARDS = 300

/** Tasks admitted, then in flight with their next poll an hour away (their lifecycles park them). */
const admitInFlight = (n: number) => Effect.tap(admitMany(n), inFlight)

/** Every task sent its steps, one outstanding Observe per task; transitions/s, latencies and CPU per transition. */
const measure = (tasks: ReadonlyArray<BenchTask>, runnerPids: ReadonlyArray<number>) =>
  Effect.gen(function*() {
    const client = yield* TaskClient
    const observations = yield* observationsOf(tasks, parkedWalk)
    const latencies: Array<number> = []
    const runnersBefore = runnerPids.map(cpuSeconds)
    const cpu = process.cpuUsage()
    const started = performance.now()
    yield* Effect.forEach(tasks, (t) =>
      Effect.gen(function*() {
        for (const obs of observations.get(t.taskId)!) {
          const t0 = performance.now()
          const r = yield* client.send(t.taskId, (c) => c.Observe(obs))
          if (r.outcome !== "changed") return yield* Effect.dieMessage(`not committed: ${r.reason}`)
          latencies.push(performance.now() - t0)
        }
      }), { concurrency: "unbounded", discard: true })
    const seconds = (performance.now() - started) / 1000
    const clientCpuMs = ownCpuMsSince(cpu)
    const runnersCpu = runnerPids.reduce((sum, pid, i) => sum + cpuSeconds(pid) - runnersBefore[i]!, 0)
    return {
      perSecond: latencies.length / seconds,
      p50: percentile(latencies, 50),
      p99: percentile(latencies, 99),
      runnersCpuMs: (runnersCpu * 1000) / latencies.length,
      clientCpuMs: clientCpuMs / latencies.length
    }
  })

/** Waits until the runners on `ports` hold every shard between them, each some (a joining runner took its share). */
const awaitShardsSpread = async (ports: ReadonlyArray<number>) => {
  const deadline = Date.now() + 120_000
  while (Date.now() < deadline) {
    const held = await Promise.all(ports.map((p) => gauge([p], "effect_cluster_shards")))
    if (held.every((n) => n > 0) && held.reduce((a, b) => a + b, 0) === SHARDS) return held
    await sleep(500)
  }
  throw new Error(`the runners did not spread the ${SHARDS} shards within 120 s`)
}

const program = Effect.gen(function*() {
  const name = `bench_${Date.now().toString(36)}`
  const admin = new pg.Client({ connectionString: adminUrl })
  yield* Effect.promise(() => admin.connect())
  yield* Effect.promise(() => admin.query(`CREATE DATABASE ${name}`))
  const url = new URL(adminUrl)
  url.pathname = `/${name}`
  const runners: Array<Awaited<ReturnType<typeof startRunnerProcess>>> = []
  yield* Effect.addFinalizer(() =>
    Effect.promise(async () => {
      for (const r of runners) await stopProcess(r.child, "SIGTERM")
      await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
      await admin.end()
    })
  )
  const startRunner = () =>
    Effect.promise(() =>
      startRunnerProcess({
        DATABASE_URL: url.toString(),
        // every role, as `npm start` (named: this process's own RUNNER_ROLES below is not theirs)
        RUNNER_ROLES: "api,webhooks,gateway,entities,singletons,dispatcher",
        // the in-process queue and bus, as the in-process bench: this measures the entities, not propagation
        ROCKETMQ_ENDPOINTS: "",
        REDIS_URL: "",
        SWEEP_GRACE: "1 hour"
      }, { nodeArgs: (process.env.BENCH_NODE_ARGS ?? "").split(" ").filter((a) => a.length > 0) })
    ).pipe(Effect.tap((r) => Effect.sync(() => runners.push(r))))

  // the first runner migrates the database; this process is a cluster client of it (no shards of its own)
  yield* startRunner()
  process.env.RUNNER_ROLES = "api"
  const stack = yield* inProcessRunner(url.toString(), 20, { echo: false })

  yield* Effect.gen(function*() {
    const results = new Map<number, Array<Effect.Effect.Success<ReturnType<typeof measure>>>>()
    for (const count of [1, PROCESSES]) {
      while (runners.length < count) yield* startRunner()
      const held = yield* Effect.promise(() => awaitShardsSpread(runners.map((r) => r.httpPort)))
      console.log(`${count} runner process(es), shards held: ${held.join(" / ")}`)
      // a runner that acquired shards wakes their live tasks at its next look (ResumeOnAcquire.ts, every 500 ms): a
      // task admitted before that look, still queued, would be submitted, to no client (one run failed so)
      yield* Effect.sleep("3 seconds")
      for (let round = 1; round <= WARMUP; round++) yield* measure(yield* admitInFlight(TASKS), [])
      const rounds: Array<Effect.Effect.Success<ReturnType<typeof measure>>> = []
      for (let round = 1; round <= ROUNDS; round++) {
        const tasks = yield* admitInFlight(TASKS)
        const m = yield* measure(tasks, runners.map((r) => r.child.pid!))
        rounds.push(m)
        console.log(
          `  round ${round}: ${m.perSecond.toFixed(0)} transitions/s, p50 ${m.p50.toFixed(1)} ms, p99 ${
            m.p99.toFixed(1)
          } ms; CPU per transition: runners ${m.runnersCpuMs.toFixed(3)} ms, this client ${m.clientCpuMs.toFixed(3)} ms`
        )
      }
      results.set(count, rounds)
    }
    const line = (count: number) => {
      const rs = results.get(count)!
      return `${count} runner process(es): ${median(rs.map((r) => r.perSecond)).toFixed(0)} transitions/s, p50 ${
        median(rs.map((r) => r.p50)).toFixed(1)
      } ms, p99 ${median(rs.map((r) => r.p99)).toFixed(1)} ms; CPU per transition: runners ${
        median(rs.map((r) => r.runnersCpuMs)).toFixed(3)
      } ms, client ${median(rs.map((r) => r.clientCpuMs)).toFixed(3)} ms`
    }
    console.log(
      `\n${TASKS} concurrent tasks x ${parkedWalk.length} observations sent by a cluster client, ${ROUNDS} rounds (medians)`
    )
    console.log(line(1))
    console.log(line(PROCESSES))
    const ratio = median(results.get(PROCESSES)!.map((r) => r.perSecond)) /
      median(results.get(1)!.map((r) => r.perSecond))
    console.log(`${PROCESSES} processes / 1: ${ratio.toFixed(2)}x`)
    console.log(healthLine(runners.map((r) => r.health.stop())))
  }).pipe(Effect.provide(stack))
})

// exits once done: the cluster client's sockets would keep this process alive
program.pipe(
  Effect.scoped,
  Effect.tapErrorCause(Effect.logError),
  Effect.provide(Logger.minimumLogLevel(LogLevel.Warning)),
  Effect.runPromiseExit
).then((exit) => process.exit(Exit.isSuccess(exit) ? 0 : 1))
