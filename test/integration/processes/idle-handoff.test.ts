import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { admin, operatorToken, runnerPath, scopedRunner, shardCounts, until } from "../../support/admin.js"
import { noDatabase } from "../../support/database.js"
import { scaled, scaledDuration } from "../../support/env.js"
import { metricOn } from "../../support/metrics.js"
import { waitForHttp } from "../../support/processes.js"
import { DbUrl, layerRunwayFixture, runwayRunnerEnv, tempFolder, twoRunnerPorts } from "../../support/runwayRunners.js"
import { Sim } from "../../support/simulator.js"
import { admitTask } from "../../support/tasks.js"

const TASKS = 60
const AUTH_SECRET = "idle-handoff-test-secret-0123456789abcdef"
const { simPort, httpA, runnerA, httpB, runnerB, A, B, sim, keyPrefix } = await twoRunnerPorts()
const objects = tempFolder("idle-handoff-objects")

const TestLayer = layerRunwayFixture(simPort)

/** A runner polling Runway every 1–3 s whose tasks go idle between polls (TASK_IDLE_AFTER 500 ms). */
const runner = (databaseUrl: string, httpPort: number, runnerPort: number) =>
  scopedRunner({
    ...runwayRunnerEnv({ databaseUrl, httpPort, runnerPort, sim, objects, keyPrefix }),
    AUTH_SECRET,
    POLL_INTERVAL_SCALE: "0.2",
    TASK_IDLE_AFTER: "500 millis",
    TASK_WAKE_LEAD: "200 millis",
    TASK_ENTITY_IDLE_TIME: "1 second",
    // the sweeper starts the admitted tasks; it would rescue a polling task only SWEEP_GRACE plus QUOTA_MAX_WAIT
    // late: here the runners must wake every polling task themselves
    QUOTA_MAX_WAIT: "5 minutes"
  })

const lastPolls = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql<{ id: string; last: Date | null }>`SELECT id, last_polled_at AS last FROM task_attempts`
).pipe(Effect.orDie)

/** tasks_parked from a runner's /metrics: its tasks idle between polls. */
const parkedOn = (port: number) => metricOn(port, "tasks_parked")

describe.skipIf(noDatabase)("a shard handoff with idle tasks", () => {
  layer(TestLayer, { timeout: scaled(180_000), excludeTestServices: true })((it) => {
    it.effect(
      "the new owner wakes them from next_poll_at: every task polled again, no poll duplicated, one submission",
      () =>
        Effect.gen(function*() {
          const simulator = yield* Sim
          const url = yield* DbUrl
          const token = yield* operatorToken(AUTH_SECRET)
          yield* simulator.setFaults({ jobDurationMs: 20 * 60_000 })
          const a = yield* runner(url, httpA, runnerA)
          const b = yield* runner(url, httpB, runnerB)
          yield* Effect.promise(() => Promise.all([waitForHttp(httpA, a), waitForHttp(httpB, b)]))
          yield* until(
            "both runners hold shards",
            shardCounts(httpA, token),
            (c) => (c.get(A) ?? 0) > 0 && (c.get(B) ?? 0) > 0
          )
          yield* Effect.forEach(Array.from({ length: TASKS }), () => admitTask({ provider: "runway" }), {
            concurrency: 8
          })
          yield* until("every task polled", lastPolls, (rows) => rows.every((r) => r.last !== null), "90 seconds")
          yield* until("B's tasks idle between polls", parkedOn(httpB), (n) => n > 0)

          // drain B: its shards, with their idle tasks, move to A
          expect((yield* admin(httpA, token, `${runnerPath(B)}/drain`, { method: "POST" })).status).toBe(204)
          yield* until("A holds every shard", shardCounts(httpA, token), (c) => c.get(A) === 300, "60 seconds")
          const handedAt = Date.now()
          yield* until(
            "every task polled after the handoff",
            lastPolls,
            (rows) => rows.every((r) => r.last !== null && r.last.getTime() > handedAt),
            "60 seconds"
          )
          yield* until("A's tasks idle between polls", parkedOn(httpA), (n) => n > TASKS / 2)

          const jobs = simulator.jobs()
          expect(jobs.length).toBe(TASKS)
          for (const job of jobs) {
            expect(simulator.submissions(job.clientKey)).toBe(1)
            // never two polls at once under the lease, across the handoff: the shortest interval is the first poll's
            const queries = simulator.queriesOf(job.id)
            const gaps = queries.slice(1).map((q, i) => q - queries[i]!)
            expect(Math.min(...gaps)).toBeGreaterThanOrEqual(300)
          }
        }).pipe(Effect.scoped),
      { timeout: scaledDuration(Duration.minutes(3)).pipe(Duration.toMillis) }
    )
  })
})
