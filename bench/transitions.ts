/**
 * npm run bench:transitions — committed task transitions/s through the GenerationTask entity on real PostgreSQL,
 * against the ceiling of the same transaction shape (TaskStore.commit: the same single statement, same pool,
 * no cluster) on the same machine, in the same run.
 *
 *   BENCH_TASKS (200)  concurrent tasks, one outstanding observation each
 *   BENCH_ROUNDS (3)   repetitions; medians are reported
 *   DATABASE_URL       admin URL; a fresh database is created and dropped
 *   BENCH_PROCESSES    (1) 2: the entity path across processes instead, hosted by 1 then 2 runner processes and sent
 *                      to by this one as a cluster client (bench/transitionsAcross.ts)
 */
import { NodeRuntime } from "@effect/platform-node"
import { Effect, Layer, Logger, LogLevel, Option, Redacted } from "effect"
import { monitorEventLoopDelay } from "node:perf_hooks"
import pg from "pg"
import type { TaskState } from "../src/domain/taskState.js"
import { makeChange } from "../src/domain/transition.js"
import { TaskClient } from "../src/entities/TaskClient.js"
import { layerPostgres } from "../src/persistence/Database.js"
import { TaskStore } from "../src/persistence/TaskStore.js"
import { layerStores } from "../src/runners/Runner.js"
import type { AttemptId, TaskId } from "../src/schema/ids.js"
import type { ProviderObservation } from "../src/schema/observation.js"
import { admitMany, history, inFlight, observationsOf, parkedWalk } from "./benchTasks.js"
import { Echo, inProcessRunner } from "./inProcessRunner.js"
import { healthLine, median, ownCpuMsSince, percentile, type RunnerHealth, SHARD_LOCK_LOSS } from "./support.js"

const TASKS = Number(process.env.BENCH_TASKS ?? 200)
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3)
/** BENCH_ENTITY_ONLY=1: the entity path alone (for a CPU profile through BENCH_NODE_ARGS or node --cpu-prof). */
/**
 * BENCH_LIFECYCLE=parked: the entity path alone with the runner's real lifecycle, each task in flight (submitted, its
 * job known) with its next poll an hour away, so its lifecycle parks it; the observations are a webhook's "running"
 * 5..95, changes that leave the task polling (what a parked task's lifecycle does about them).
 */
const PARKED = process.env.BENCH_LIFECYCLE === "parked"
// the tasks wait queued (admitted for the "simulator" provider, which has no client) until they are put in flight:
// the sweeper must not wake them meanwhile (nor the runner's shards being taken: below)
if (PARKED) process.env.SWEEP_GRACE = "1 hour"
const ENTITY_ONLY = process.env.BENCH_ENTITY_ONLY === "1" || PARKED
const POOL = Number(process.env.DB_POOL_SIZE ?? 20)
const adminUrl = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres"

/** What each task is sent: the history, or (BENCH_LIFECYCLE=parked) its "running" steps alone. */
const walk = PARKED ? parkedWalk : history

/** The cluster's own floor on this machine: the same message pattern to an entity whose handler does nothing. */
const viaEcho = (t: { taskId: TaskId }, step: number) =>
  Effect.flatMap(Echo.client, (make) => make(t.taskId).Ping({ n: step })).pipe(Effect.asVoid)

/**
 * The runner here is this process: its event-loop lag p99 per 1 s window (perf_hooks, as the runner's own
 * event_loop_lag_seconds) and the library's SHARD_LOCK_LOSS lines, counted by a logger beside the default one.
 */
const inProcessHealth = (): RunnerHealth & { readonly logger: Logger.Logger<unknown, void> } => {
  const h = monitorEventLoopDelay({ resolution: 10 })
  h.enable()
  const timer = setInterval(() => {
    health.lagP99Ms.push(Math.max(0, h.percentile(99) / 1e6 - 10))
    h.reset()
  }, 1_000)
  const health = {
    lagP99Ms: [] as Array<number>,
    shardLockLosses: 0,
    logger: Logger.make(({ message }) => {
      if (String(message).includes(SHARD_LOCK_LOSS)) health.shardLockLosses++
    }),
    stop: () => {
      clearInterval(timer)
      h.disable()
      return {
        lagP99Ms: percentile(health.lagP99Ms, 50),
        lagMaxWindowMs: health.lagP99Ms.length === 0 ? NaN : Math.max(...health.lagP99Ms),
        shardLockLosses: health.shardLockLosses
      }
    }
  }
  return health
}
const health = inProcessHealth()

/**
 * Every task walks its history, one outstanding request per task; returns transitions/s and latencies, and the p99 of
 * the later steps alone (`p99Later`): each round's tasks are new, so every task's first message also builds its entity
 * (200 at once when a round starts), and those 200 of its 4,200 latencies alone can make the p99.
 */
const measure = <R>(
  tasks: ReadonlyArray<{ taskId: TaskId; attemptId: AttemptId }>,
  apply: (t: { taskId: TaskId; attemptId: AttemptId }, step: number) => Effect.Effect<void, unknown, R>
) =>
  Effect.gen(function*() {
    const latencies: Array<number> = []
    const later: Array<number> = []
    const started = performance.now()
    const cpu = process.cpuUsage()
    yield* Effect.forEach(tasks, (t) =>
      Effect.gen(function*() {
        for (let step = 0; step < walk.length; step++) {
          const t0 = performance.now()
          yield* apply(t, step)
          latencies.push(performance.now() - t0)
          if (step > 0) later.push(performance.now() - t0)
        }
      }), { concurrency: "unbounded", discard: true })
    const seconds = (performance.now() - started) / 1000
    const cpuMs = ownCpuMsSince(cpu)
    return {
      perSecond: latencies.length / seconds,
      p50: percentile(latencies, 50),
      p99: percentile(latencies, 99),
      p99Later: percentile(later, 99),
      // this process's CPU per transition: what the machine's load (other programs) changes least
      cpuMs: cpuMs / latencies.length
    }
  })

/** Observations are decoded once at the edge (webhook gateway, poller): built before timing starts. */
const viaEntity =
  (observations: Map<TaskId, ReadonlyArray<ProviderObservation>>) =>
  (t: { taskId: TaskId; attemptId: AttemptId }, step: number) =>
    Effect.flatMap(TaskClient, (client) => client.send(t.taskId, (c) => c.Observe(observations.get(t.taskId)![step]!)))
      .pipe(
        Effect.flatMap((r) => r.outcome === "changed" ? Effect.void : Effect.dieMessage(`not committed: ${r.reason}`))
      )

/** The ceiling: the same commit statement, state kept in memory like the entity's cache, no cluster hop. */
const viaStore = (cache: Map<TaskId, TaskState>) => (t: { taskId: TaskId }, step: number) =>
  Effect.gen(function*() {
    const store = yield* TaskStore
    const state = cache.get(t.taskId) ?? Option.getOrThrow(yield* store.load(t.taskId))
    const h = history[step]!
    const status = h.status === "queued" ? "submitted" : h.status === "running" ? "running" : "provider_succeeded"
    const change = makeChange(
      state.task,
      state.attempt,
      {
        status,
        stage: status === "submitted" ? "provider_queued" : status === "running" ? "generating" : "generated",
        progress: h.progress,
        errorCode: null
      },
      new Date(),
      { source: "poll", traceId: "bench" }
    )
    const res = yield* store.commit(state.task, change)
    if (res._tag !== "Committed") return yield* Effect.dieMessage("ceiling commit lost its CAS")
    cache.set(t.taskId, { task: res.task, attempt: res.attempt })
  })

const program = Effect.gen(function*() {
  const name = `bench_${Date.now().toString(36)}`
  const admin = new pg.Client({ connectionString: adminUrl })
  yield* Effect.promise(() => admin.connect())
  yield* Effect.promise(() => admin.query(`CREATE DATABASE ${name}`))
  yield* Effect.addFinalizer(() =>
    Effect.promise(async () => {
      await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
      await admin.end()
    })
  )
  const url = new URL(adminUrl)
  url.pathname = `/${name}`
  const stack = yield* inProcessRunner(url.toString(), POOL, { lifecycle: PARKED })

  yield* Effect.gen(function*() {
    // the runner takes its shards in its first seconds, and the tasks of each shard it takes are woken then
    // (ResumeOnAcquire): a task still queued would be submitted, to no client
    if (PARKED) yield* Effect.sleep("10 seconds")
    const entity: Array<{ perSecond: number; p50: number; p99: number; p99Later: number; cpuMs: number }> = []
    const ceiling: Array<{ perSecond: number; p50: number; p99: number; cpuMs: number }> = []
    const floor: Array<{ perSecond: number; p50: number; p99: number; cpuMs: number }> = []
    const single: Array<{ perSecond: number; p50: number; p99: number; cpuMs: number }> = []
    // the pgbench-like ceiling: the same statement, one change per transaction (no group commit)
    process.env.COMMIT_MAX_BATCH = "1"
    const unbatched = layerStores(layerPostgres({
      url: Redacted.make(url.toString()),
      maxConnections: POOL,
      applicationName: "bench-single"
    }))
    for (let round = 1; round <= ROUNDS; round++) {
      const entityTasks = yield* admitMany(TASKS)
      if (PARKED) yield* inFlight(entityTasks)
      const observations = yield* observationsOf(entityTasks, walk)
      const a = yield* measure(entityTasks, viaEntity(observations))
      if (ENTITY_ONLY) {
        console.log(
          `round ${round}: entity ${a.perSecond.toFixed(0)}/s p50 ${a.p50.toFixed(1)} ms p99 ${a.p99.toFixed(1)} ms ` +
            `(after the first step ${a.p99Later.toFixed(1)} ms) CPU ${a.cpuMs.toFixed(3)} ms/transition`
        )
        continue
      }
      const b = yield* measure(yield* admitMany(TASKS), viaStore(new Map()))
      const f = yield* measure(entityTasks, viaEcho)
      const u = yield* Effect.provide(
        Effect.flatMap(admitMany(TASKS), (tasks) => measure(tasks, viaStore(new Map()))),
        unbatched
      )
      single.push(u)
      entity.push(a)
      ceiling.push(b)
      floor.push(f)
      console.log(
        `round ${round}: entity ${a.perSecond.toFixed(0)}/s p50 ${a.p50.toFixed(1)} ms p99 ${a.p99.toFixed(1)} ms ` +
          `(${a.cpuMs.toFixed(3)} ms CPU each) | raw statement ${b.perSecond.toFixed(0)}/s p50 ${
            b.p50.toFixed(1)
          } ms ` +
          `p99 ${b.p99.toFixed(1)} ms (${b.cpuMs.toFixed(3)} ms CPU each) | no-op entity ${f.perSecond.toFixed(0)}/s ` +
          `(${f.cpuMs.toFixed(3)} ms CPU each) | one change per transaction ${u.perSecond.toFixed(0)}/s`
      )
    }
    if (ENTITY_ONLY) return console.log(healthLine([health.stop()]))
    const e = median(entity.map((x) => x.perSecond))
    const r = median(ceiling.map((x) => x.perSecond))
    console.log(
      `\n${TASKS} concurrent tasks x ${history.length} observations, PG pool ${POOL}, ${ROUNDS} rounds (medians)`
    )
    console.log(
      `entity (cluster Observe -> transition -> one fenced CAS commit): ${e.toFixed(0)} transitions/s, ` +
        `p50 ${median(entity.map((x) => x.p50)).toFixed(1)} ms, p99 ${
          median(entity.map((x) => x.p99)).toFixed(1)
        } ms ` +
        `(the steps after each task's first, whose message also built its entity: p99 ${
          median(entity.map((x) => x.p99Later)).toFixed(1)
        } ms)`
    )
    console.log(
      `ceiling (same statement via TaskStore.commit, no cluster):      ${r.toFixed(0)} transitions/s, ` +
        `p50 ${median(ceiling.map((x) => x.p50)).toFixed(1)} ms, p99 ${median(ceiling.map((x) => x.p99)).toFixed(1)} ms`
    )
    console.log(`ratio entity / ceiling: ${((e / r) * 100).toFixed(0)}%`)
    // where the entity's time goes, in this process's CPU (PostgreSQL's is not counted): the commit (ceiling), the
    // cluster hop (no-op entity), and the rest is the entity's own work per transition
    const cpu = (xs: ReadonlyArray<{ cpuMs: number }>) => median(xs.map((x) => x.cpuMs))
    console.log(
      `CPU per transition (this process): entity ${cpu(entity).toFixed(3)} ms = commit ${
        cpu(ceiling).toFixed(3)
      } ms + ` +
        `cluster hop ${cpu(floor).toFixed(3)} ms + the entity's own ${
          (cpu(entity) - cpu(ceiling) - cpu(floor)).toFixed(3)
        } ms`
    )
    const u = median(single.map((x) => x.perSecond))
    console.log(
      `one change per transaction (pgbench-like: no group commit, no cluster): ${u.toFixed(0)} transitions/s, ` +
        `p50 ${median(single.map((x) => x.p50)).toFixed(1)} ms, p99 ${
          median(single.map((x) => x.p99)).toFixed(1)
        } ms; ` +
        `entity / this: ${((e / u) * 100).toFixed(0)}%`
    )
    console.log(
      `cluster floor (same pattern, no-op entity, no database): ${
        median(floor.map((x) => x.perSecond)).toFixed(0)
      } msg/s`
    )
    console.log(healthLine([health.stop()]))
  }).pipe(Effect.provide(stack))
})

// BENCH_PROCESSES=2: the entity path across processes (bench/transitionsAcross.ts) instead
if (Number(process.env.BENCH_PROCESSES ?? 1) > 1) {
  health.stop()
  await import("./transitionsAcross.js")
} else {
  program.pipe(
    Effect.scoped,
    Effect.provide(Layer.merge(Logger.minimumLogLevel(LogLevel.Warning), Logger.add(health.logger))),
    NodeRuntime.runMain
  )
}
