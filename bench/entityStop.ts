/**
 * npm run bench:entity-stop — what an entity costs to build, and a runner's shutdown per entity it holds. A stopping
 * runner stops every entity it holds before it lets their shards go (@effect/cluster: the entity layer's scope closes
 * each entity's, then the shard locks are released), so with SIGTERM the survivor waits for this. One runner in this
 * process, each time on a fresh database: N task entities built (a GetSnapshot each, 50 at a time; an active task's
 * build starts its lifecycle, which here has nothing to drive), then the runner's scope closed; the same with N entities
 * whose handler does nothing (the library's own share), and with none (the rest of the shutdown). Prints wall time and
 * this process's CPU (all threads: GC's too) per entity: of the builds (against a second GetSnapshot to each, the
 * entity built: the message's own cost), and of the shutdown.
 *
 *   BENCH_ENTITIES (1000)  BENCH_ROUNDS (3; medians)  DATABASE_URL (admin URL)
 */
import { NodeRuntime } from "@effect/platform-node"
import { Effect, Exit, Layer, Logger, LogLevel, Scope } from "effect"
import pg from "pg"
import { TaskClient } from "../src/entities/TaskClient.js"
import type { TaskId } from "../src/schema/ids.js"
import { admitTask } from "../test/support/tasks.js"
import { Echo, inProcessRunner } from "./inProcessRunner.js"
import { ownCpuMsSince, percentile } from "./support.js"

const ENTITIES = Number(process.env.BENCH_ENTITIES ?? 1000)
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3)
const adminUrl = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres"

type Kind = "task" | "no-op" | "none"

/** This process's CPU (ms, all threads) over `effect`. */
const cpuMsOf = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.suspend(() => {
    const cpu = process.cpuUsage()
    return Effect.map(effect, () => ownCpuMsSince(cpu))
  })

/**
 * A runner built on `url`, `ENTITIES` entities of `kind` woken on it, then its scope closed: the builds' CPU per
 * entity, the shutdown's wall ms and CPU ms.
 */
const stopOnce = (url: string, kind: Kind) =>
  Effect.gen(function*() {
    const stack = yield* inProcessRunner(url, 20)
    const scope = yield* Scope.make()
    const context = yield* Layer.buildWithScope(stack, scope)
    const build = yield* Effect.gen(function*() {
      const tasks = yield* Effect.forEach(Array.from({ length: ENTITIES }), () => admitTask(), { concurrency: 16 })
      const each = (f: (taskId: TaskId) => Effect.Effect<unknown, unknown, TaskClient>) =>
        Effect.forEach(tasks, (t) => f(t.taskId), { concurrency: 50, discard: true })
      const message = kind === "task"
        ? each((taskId) => Effect.flatMap(TaskClient, (client) => client.send(taskId, (e) => e.GetSnapshot())))
        : kind === "no-op"
        ? Effect.flatMap(Echo.client, (make) => each((taskId) => make(taskId).Ping({ n: 1 })))
        : Effect.void
      // the first message to each builds its entity; the second is the message alone
      return { first: yield* cpuMsOf(message), second: yield* cpuMsOf(message) }
    }).pipe(Effect.provide(context))
    yield* Effect.sleep("1 second")
    const started = performance.now()
    const cpuMs = yield* cpuMsOf(Scope.close(scope, Exit.void))
    return {
      wallMs: performance.now() - started,
      cpuMs,
      buildCpuMs: (build.first - build.second) / ENTITIES
    }
  })

/** A fresh database for `f` (a runner on an old one would resume the tasks left there: entities of its own). */
const onFreshDatabase = <A, E, R>(admin: pg.Client, f: (url: string) => Effect.Effect<A, E, R>) =>
  Effect.acquireUseRelease(
    Effect.promise(async () => {
      const name = `bench_entity_stop_${Date.now().toString(36)}`
      await admin.query(`CREATE DATABASE ${name}`)
      return name
    }),
    (name) => {
      const url = new URL(adminUrl)
      url.pathname = `/${name}`
      return f(url.toString())
    },
    (name) => Effect.promise(() => admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`))
  )

const program = Effect.gen(function*() {
  const admin = new pg.Client({ connectionString: adminUrl })
  yield* Effect.acquireRelease(Effect.promise(() => admin.connect()), () => Effect.promise(() => admin.end()))
  const figures: Record<Kind, Array<{ wallMs: number; cpuMs: number; buildCpuMs: number }>> = {
    task: [],
    "no-op": [],
    none: []
  }
  for (let round = 1; round <= ROUNDS; round++) {
    for (const kind of ["none", "task", "no-op"] as const) {
      const f = yield* onFreshDatabase(admin, (url) => stopOnce(url, kind))
      figures[kind].push(f)
      console.log(
        `round ${round}: ${kind} entities: ${
          kind === "none" ? "" : `build CPU ${f.buildCpuMs.toFixed(2)} ms each, `
        }shutdown ${f.wallMs.toFixed(0)} ms, CPU ${f.cpuMs.toFixed(0)} ms`
      )
    }
  }
  const median = (kind: Kind, k: "wallMs" | "cpuMs" | "buildCpuMs") => percentile(figures[kind].map((f) => f[k]), 50)
  const base = { wall: median("none", "wallMs"), cpu: median("none", "cpuMs") }
  console.log(
    `\nbuilding an entity (its first message's CPU over its second's, medians of ${ROUNDS}): task ${
      median("task", "buildCpuMs").toFixed(2)
    } ms, no-op ${median("no-op", "buildCpuMs").toFixed(2)} ms`
  )
  console.log(`shutdown of one runner with ${ENTITIES} entities (medians of ${ROUNDS}; none: the rest of it)`)
  console.log(`none:  ${base.wall.toFixed(0)} ms, CPU ${base.cpu.toFixed(0)} ms`)
  for (const kind of ["task", "no-op"] as const) {
    const wall = median(kind, "wallMs")
    const cpu = median(kind, "cpuMs")
    console.log(
      `${kind.padEnd(6)} ${wall.toFixed(0)} ms, CPU ${cpu.toFixed(0)} ms: per entity ${
        ((wall - base.wall) / ENTITIES).toFixed(2)
      } ms, CPU ${((cpu - base.cpu) / ENTITIES).toFixed(2)} ms`
    )
  }
})

program.pipe(Effect.scoped, Effect.provide(Logger.minimumLogLevel(LogLevel.Error)), NodeRuntime.runMain)
