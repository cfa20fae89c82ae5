import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Duration, Effect, Fiber, Schedule } from "effect"
import { admin, operatorToken, runnerPath, runOps, scopedRunner, shardCounts, until } from "../../support/admin.js"
import { noDatabase } from "../../support/database.js"
import { scaled, scaledDuration } from "../../support/env.js"
import { waitForHttp } from "../../support/processes.js"
import { DbUrl, layerRunwayFixture, runwayRunnerEnv, tempFolder, twoRunnerPorts } from "../../support/runwayRunners.js"
import { Sim } from "../../support/simulator.js"
import { admitTask } from "../../support/tasks.js"

const TASKS = 200
/** After its shard moved, a task's entity is woken by the new owner's next look (ResumeOnAcquire, every 500 ms). */
const RESUME_ALLOWANCE_MS = scaled(1_000)
const AUTH_SECRET = "cluster-drain-test-secret-0123456789abcdef"
const { simPort, httpA, runnerA, httpB, runnerB, A, B, sim, keyPrefix } = await twoRunnerPorts()
const objects = tempFolder("cluster-drain-objects")

const TestLayer = layerRunwayFixture(simPort)

/** A runner polling Runway (polling only) on the simulator every 1–3 s (POLL_INTERVAL_SCALE 0.2). */
const runner = (databaseUrl: string, httpPort: number, runnerPort: number) =>
  scopedRunner({
    ...runwayRunnerEnv({ databaseUrl, httpPort, runnerPort, sim, objects, keyPrefix }),
    AUTH_SECRET,
    POLL_INTERVAL_SCALE: "0.2"
  })

interface Poll {
  readonly id: string
  readonly last: number | null
  readonly next: number | null
}

const polls = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) =>
    sql<{ id: string; last: Date | null; next: Date | null }>`
      SELECT id, last_polled_at AS last, next_poll_at AS next FROM task_attempts`
).pipe(
  Effect.map((rows) =>
    rows.map((r): Poll => ({ id: r.id, last: r.last?.getTime() ?? null, next: r.next?.getTime() ?? null }))
  ),
  Effect.orDie
)

/**
 * Watches every task's polls (task_attempts.last_polled_at, every 100 ms; a poll happens at most every second here)
 * and records, per poll, how late it came after the time the previous poll scheduled it for (next_poll_at).
 */
const watchPolls = Effect.gen(function*() {
  const seen = new Map<string, Poll>()
  const lateness: Array<{ id: string; at: number; lateMs: number }> = []
  const fiber = yield* polls.pipe(
    Effect.tap((rows) =>
      Effect.sync(() => {
        for (const r of rows) {
          const before = seen.get(r.id)
          if (before?.last != null && r.last !== null && r.last !== before.last && before.next !== null) {
            lateness.push({ id: r.id, at: r.last, lateMs: r.last - before.next })
          }
          if (before === undefined || r.last !== before.last || r.next !== before.next) seen.set(r.id, r)
        }
      })
    ),
    Effect.repeat(Schedule.spaced(Duration.millis(100))),
    Effect.fork
  )
  return { fiber, lateness, seen }
})

describe.skipIf(noDatabase)("draining a runner", () => {
  layer(TestLayer, { timeout: scaled(120_000), excludeTestServices: true })((it) => {
    it.effect(
      `with ${TASKS} polling tasks: its shards move, no poll is late by more than the handoff, undrain`,
      () =>
        Effect.gen(function*() {
          const simulator = yield* Sim
          const url = yield* DbUrl
          const token = yield* operatorToken(AUTH_SECRET)
          // jobs that run for the whole test: every task keeps polling
          yield* simulator.setFaults({ jobDurationMs: 20 * 60_000 })
          const a = yield* runner(url, httpA, runnerA)
          const b = yield* runner(url, httpB, runnerB)
          yield* Effect.promise(() => Promise.all([waitForHttp(httpA, a), waitForHttp(httpB, b)]))
          // the tasks arrive once both runners share the shards (the sweeper starts them): what is measured is the
          // drain, not two runners sharing out the shards at start, which cuts submissions short (they then wait
          // SUBMIT_UNKNOWN_GRACE and a reconciler round to be resolved)
          yield* until(
            "both runners hold shards",
            shardCounts(httpA, token),
            (c) => (c.get(A) ?? 0) > 0 && (c.get(B) ?? 0) > 0
          )
          yield* Effect.forEach(Array.from({ length: TASKS }), () => admitTask({ provider: "runway" }), {
            concurrency: 8
          })
          // every task submitted and polled before the drain; a straggler is reported at the end, after the figures
          yield* until("every task polled", polls, (rows) => rows.every((r) => r.last !== null), "90 seconds").pipe(
            Effect.catchAllDefect((e) =>
              Effect.logWarning(`not every task polled before the drains: ${String(e).slice(0, 200)}`)
            )
          )
          const polledBefore = new Set((yield* polls).filter((r) => r.last !== null).map((r) => r.id))

          const watch = yield* watchPolls
          const handoffs: Array<number> = []
          const ops = { OPS_URL: `http://127.0.0.1:${httpA}`, OPS_TOKEN: token }
          for (let round = 0; round < 3; round++) {
            // drain B: through the CLI once, through the API after
            const drainedAt = Date.now()
            if (round === 0) {
              const out = yield* runOps(["runner", "drain", B], ops)
              expect(out.code).toBe(0)
              expect(out.stdout).toContain(`${B} drained`)
            } else {
              expect((yield* admin(httpA, token, `${runnerPath(B)}/drain`, { method: "POST" })).status).toBe(204)
            }
            yield* until("A holds every shard", shardCounts(httpA, token), (c) => c.get(A) === 300, "60 seconds")
            const handoff = Date.now() - drainedAt
            handoffs.push(handoff)

            // the drained runner still serves HTTP, and says it is drained with no shards
            const view = yield* admin(httpB, token, "/admin/cluster")
            expect(view.status).toBe(200)
            const runners = (view.body as { runners: Array<{ address: string; draining: boolean; shards: number }> })
              .runners
            expect(runners.find((r) => r.address === B)).toMatchObject({ draining: true, shards: 0 })

            // every task is polled again after the handoff, by A
            const handedAt = Date.now()
            yield* until(
              "every task polled after the handoff",
              polls,
              (rows) => rows.every((r) => !polledBefore.has(r.id) || (r.last !== null && r.last > handedAt))
            )
            const lateDuring = watch.lateness.filter((l) => l.at >= drainedAt)
            const worst = Math.max(0, ...lateDuring.map((l) => l.lateMs))
            yield* Effect.logWarning(
              `round ${round + 1}: all shards on A ${handoff} ms after the drain; worst poll lateness ${worst} ms ` +
                `(${lateDuring.length} polls)`
            )
            // no task misses a poll for longer than its interval plus the handoff time (lateness counts from the
            // time its previous poll scheduled: the interval is already subtracted), plus what resuming a task on
            // its new owner takes: the owner's look for acquired shards (every 500 ms) and the entity's restart
            expect(worst).toBeLessThanOrEqual(handoff + RESUME_ALLOWANCE_MS)

            // undrain: B takes its share back
            if (round === 0) {
              const out = yield* runOps(["runner", "undrain", B], ops)
              expect(out.code).toBe(0)
            } else {
              expect((yield* admin(httpA, token, `${runnerPath(B)}/undrain`, { method: "POST" })).status).toBe(204)
            }
            yield* until(
              "B takes its share back",
              shardCounts(httpA, token),
              (c) => (c.get(B) ?? 0) >= 100 && (c.get(A) ?? 0) >= 100,
              "60 seconds"
            )
            const backAt = Date.now()
            yield* until(
              "every task polled after the undrain",
              polls,
              (rows) => rows.every((r) => !polledBefore.has(r.id) || (r.last !== null && r.last > backAt))
            )
          }
          yield* Fiber.interrupt(watch.fiber)
          const sorted = [...handoffs].sort((x, y) => x - y)
          yield* Effect.logWarning(`drain handoff ms: ${handoffs.join(", ")}; median ${sorted[1]} ms`)

          expect(polledBefore.size).toBe(TASKS)
          // no submission was duplicated: one job per task, each submitted once
          const jobs = simulator.jobs()
          expect(jobs.length).toBe(TASKS)
          for (const job of jobs) expect(simulator.submissions(job.clientKey)).toBe(1)
        }).pipe(Effect.scoped),
      { timeout: scaledDuration(Duration.minutes(4)).pipe(Duration.toMillis) }
    )
  })
})
