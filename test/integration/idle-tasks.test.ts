import { Sharding } from "@effect/cluster"
import { FetchHttpClient } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { afterAll, describe, expect, layer } from "@effect/vitest"
import { Duration, Effect, Fiber, Layer, Metric, Schedule } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { plainWakesSkipped, tasksParked } from "../../src/entities/ParkedTasks.js"
import { TaskClient } from "../../src/entities/TaskClient.js"
import { taskChangeWakesSkipped } from "../../src/observability/metrics.js"
import { simulatorEnv } from "../../src/simulator/embedded.js"
import { layerTestDatabase, noDatabase } from "../support/database.js"
import { scaled } from "../support/env.js"
import { startTask, waitForStatus } from "../support/lifecycle.js"
import { until } from "../support/propagation.js"
import { freePort, layerTestRunner, quietLogs, withSettings } from "../support/runner.js"
import { layerRunnerHttp, layerSim, Sim } from "../support/simulator.js"
import { uuid } from "../support/tasks.js"

const [httpPort, simPort] = await Effect.runPromise(Effect.all([freePort, freePort]))
const platform = `http://127.0.0.1:${httpPort}`
const sim = `http://127.0.0.1:${simPort}`
const objects = fs.mkdtempSync(path.join(os.tmpdir(), "idle-objects-"))
afterAll(() => fs.rmSync(objects, { recursive: true, force: true }))
const PROVIDERS = ["openai", "replicate", "runway"] as const

/** A runner whose polling tasks go idle whenever their next poll is more than 300 ms away (nearly always). */
const layerWith = (overrides: Readonly<Record<string, string>>) =>
  layerSim(simPort, platform).pipe(
    Layer.provideMerge(
      layerRunnerHttp(httpPort).pipe(
        Layer.provideMerge(layerTestRunner(layerTestDatabase(), { lifecycle: true }))
      )
    ),
    Layer.provide(FetchHttpClient.layer),
    Layer.provide(quietLogs),
    Layer.provide(withSettings({
      ...simulatorEnv(platform, sim, PROVIDERS),
      PROVIDER_TIMEOUT: "2 seconds",
      SUBMIT_UNKNOWN_GRACE: "1 second",
      OBJECT_STORE_DIR: objects,
      REDIS_KEY_PREFIX: `test-${uuid()}:`,
      SWEEP_INTERVAL: "1 second",
      SWEEP_GRACE: "3 seconds",
      TASK_IDLE_AFTER: "300 millis",
      TASK_WAKE_LEAD: "100 millis",
      ...Object.fromEntries(PROVIDERS.map((p) => [`${p.toUpperCase()}_LOOKUP`, "true"])),
      ...overrides
    }))
  )

const attemptOf = (taskId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ provider_task_id: string | null; next_poll_at: Date | null }>`
      SELECT a.provider_task_id, a.next_poll_at FROM task_attempts a
      JOIN generation_tasks t ON t.current_attempt_id = a.id WHERE t.id = ${taskId}`).pipe(
      Effect.map((rows) => rows[0]!),
      Effect.orDie
    )

/**
 * The messages the tasks' entities have in @effect/cluster's message table. Every Rpc of a task is volatile, and its
 * keep-alive is held in memory (inMemoryKeepAlive.ts): none. The keep-alive was a persisted message once, two writes
 * per lifecycle run (and a snowflake read back rounded sent its reply to another message: pg-int8.test.ts).
 */
const persistedMessagesOf = (taskIds: ReadonlyArray<string>) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ n: number }>`
      SELECT count(*)::int AS n FROM cluster_messages WHERE entity_id IN ${sql.in(taskIds)}`).pipe(
      Effect.map((rows) => rows[0]!.n),
      Effect.orDie
    )

const parkedNow = () => Effect.runSync(Metric.value(tasksParked)).value

/** The attempt's next poll once it is scheduled (the submission commits first, then schedules it). */
const scheduledPoll = (taskId: string) =>
  attemptOf(taskId).pipe(
    Effect.flatMap((a) => (a.next_poll_at === null ? Effect.fail("not scheduled") : Effect.succeed(a))),
    Effect.retry({ schedule: Schedule.spaced("50 millis"), times: 200 })
  )

const readyAt = (taskId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ at: Date }>`SELECT terminal_at AS at FROM generation_tasks WHERE id = ${taskId}`
  ).pipe(
    Effect.map((rows) => rows[0]!.at),
    Effect.orDie
  )

/** Keeps the largest number of parked tasks and the smallest number of live entities seen, every 50 ms. */
const sampleMemory = Effect.gen(function*() {
  const sharding = yield* Sharding.Sharding
  const seen = { maxParked: 0, minEntities: Number.POSITIVE_INFINITY }
  const fiber = yield* Effect.gen(function*() {
    seen.maxParked = Math.max(seen.maxParked, (yield* Metric.value(tasksParked)).value)
    seen.minEntities = Math.min(seen.minEntities, yield* sharding.activeEntityCount)
  }).pipe(Effect.zipRight(Effect.sleep("50 millis")), Effect.forever, Effect.fork)
  return { seen, stop: Fiber.interrupt(fiber) }
})

describe.skipIf(noDatabase)("idle task entities", () => {
  // running tasks are polled every 0.5–1.5 s; an entity with nothing to do leaves memory 1 s after its last message
  layer(
    layerWith({ POLL_INTERVAL_SCALE: "0.1", TASK_ENTITY_IDLE_TIME: "1 second", QUOTA_RUNWAY_QPS: "50" }),
    { timeout: scaled(120_000), excludeTestServices: true }
  )((it) => {
    it.effect("idle tasks are woken for each poll: polled until done, no poll duplicated, one submission each", () =>
      Effect.gen(function*() {
        const simulator = yield* Sim
        yield* simulator.setFaults({
          jobDurationMs: 12_000,
          dropWebhooks: 1,
          outcomes: { succeeded: 1, failed: 0, canceled: 0 }
        })
        const memory = yield* sampleMemory
        const tasks = yield* Effect.forEach(Array.from({ length: 6 }, () => "runway"), (p) => startTask(p), {
          concurrency: 6
        })
        const ids = tasks.map((t) => t.taskId)
        yield* waitForStatus(ids, ["running"], Duration.seconds(30))
        // between polls the tasks wait parked, and their entities leave memory (the reaper looks every 5 s)
        yield* until("tasks parked and entities gone", () => memory.seen.maxParked > 0 && memory.seen.minEntities < 6)
        yield* waitForStatus(ids, ["ready"], Duration.seconds(60))
        yield* memory.stop

        for (const t of tasks) {
          const { provider_task_id } = yield* attemptOf(t.taskId)
          const job = simulator.jobs().find((j) => j.id === provider_task_id)!
          expect(simulator.submissions(job.clientKey)).toBe(1)
          const queries = simulator.queriesOf(job.id)
          // woken from their schedule again and again: every poll happened (12 s of job, polls ≤ 1.5 s apart)
          expect(queries.length).toBeGreaterThanOrEqual(4)
          // never two polls at once under the lease: the shortest interval is the first poll's 0.2 s
          const gaps = queries.slice(1).map((q, i) => q - queries[i]!)
          expect(Math.min(...gaps)).toBeGreaterThanOrEqual(150)
        }
        // the tasks held their entities in memory without a message in the cluster's table
        expect(yield* persistedMessagesOf(ids)).toBe(0)
      }))
  })
})

describe.skipIf(noDatabase)("idle task entities woken by messages", () => {
  // the first poll 80–200 s after the submission (far beyond what a loaded CI machine takes to deliver a webhook: at
  // 20–50 s one run finished 99 ms after the poll was due), idle entities stay in memory and the sweeper looks only at
  // tasks 2 minutes late: only a message can wake them early
  layer(
    layerWith({ POLL_INTERVAL_SCALE: "40", TASK_ENTITY_IDLE_TIME: "10 minutes", SWEEP_GRACE: "2 minutes" }),
    { timeout: scaled(120_000), excludeTestServices: true }
  )((it) => {
    it.effect("a webhook wakes an idle task: ready before its next poll, which never happens", () =>
      Effect.gen(function*() {
        const simulator = yield* Sim
        yield* simulator.setFaults({ jobDurationMs: 1500, dropWebhooks: 0 })
        const t = yield* startTask("replicate")
        const { next_poll_at, provider_task_id } = yield* scheduledPoll(t.taskId)
        yield* until("parked", () => parkedNow() > 0)
        yield* waitForStatus([t.taskId], ["ready"], Duration.seconds(20))
        // the webhook's message woke the task: it finished before the poll it was waiting for was due
        expect((yield* readyAt(t.taskId)).getTime()).toBeLessThan(next_poll_at!.getTime())
        expect(simulator.queriesOf(provider_task_id!)).toEqual([])
        expect(simulator.submissions(simulator.jobs().find((j) => j.id === provider_task_id)!.clientKey)).toBe(1)
      }))

    it.effect("a webhook that leaves a parked task polling (its \"running\") starts nothing; a cancel still does", () =>
      Effect.gen(function*() {
        const simulator = yield* Sim
        // running ~1 s after the submission, done a minute later: the only webhook in the test is the "running" one
        yield* simulator.setFaults({ jobDurationMs: 60_000, queuedShare: 0.02, dropWebhooks: 0 })
        const skipped = (yield* Metric.value(taskChangeWakesSkipped)).count
        const t = yield* startTask("replicate")
        const { provider_task_id } = yield* scheduledPoll(t.taskId)
        yield* waitForStatus([t.taskId], ["running"], Duration.seconds(30))
        // submitted → running leaves its next step the poll already scheduled: its lifecycle was not started for it
        yield* until("the wake skipped", () => Effect.runSync(Metric.value(taskChangeWakesSkipped)).count > skipped)
        expect(parkedNow()).toBeGreaterThan(0)
        expect(simulator.queriesOf(provider_task_id!)).toEqual([])
        // a change of step wakes it at once: the cancel reaches the provider
        yield* (yield* TaskClient).send(t.taskId, (c) => c.Cancel({ traceId: "test" }))
        yield* until(
          "provider cancel",
          () => simulator.jobs().find((j) => j.id === provider_task_id)?.canceledAt != null
        )
        yield* waitForStatus([t.taskId], ["canceled"], Duration.seconds(30))
      }))

    it.effect("a plain Start (the sweeper's) leaves a parked task parked: no poll before it is due", () =>
      Effect.gen(function*() {
        const simulator = yield* Sim
        yield* simulator.setFaults({ jobDurationMs: 60_000, dropWebhooks: 1 })
        const t = yield* startTask("runway")
        const { provider_task_id } = yield* scheduledPoll(t.taskId)
        yield* until("parked", () => parkedNow() > 0)
        const skipped = (yield* Metric.value(plainWakesSkipped)).count
        const client = yield* TaskClient
        const res = yield* client.send(t.taskId, (c) => c.Start({ traceId: "test" }))
        expect(res.status).toBe("submitted")
        // the entity answered without starting its lifecycle: the runner still holds the task for its next poll
        expect((yield* Metric.value(plainWakesSkipped)).count).toBe(skipped + 1)
        expect(parkedNow()).toBeGreaterThan(0)
        expect(simulator.queriesOf(provider_task_id!)).toEqual([])
        // a change still wakes it at once: the cancel reaches the provider
        yield* client.send(t.taskId, (c) => c.Cancel({ traceId: "test" }))
        yield* until(
          "provider cancel",
          () => simulator.jobs().find((j) => j.id === provider_task_id)?.canceledAt != null
        )
        yield* waitForStatus([t.taskId], ["canceled"], Duration.seconds(30))
      }))

    it.effect("a cancel wakes an idle task: the provider is asked before the task's next poll was due", () =>
      Effect.gen(function*() {
        const simulator = yield* Sim
        yield* simulator.setFaults({ jobDurationMs: 60_000, dropWebhooks: 1 })
        const t = yield* startTask("runway")
        const before = yield* scheduledPoll(t.taskId)
        yield* until("parked", () => parkedNow() > 0)
        const res = yield* (yield* TaskClient).send(t.taskId, (c) => c.Cancel({ traceId: "test" }))
        expect(res.task.status).toBe("cancel_requested")
        yield* until(
          "provider cancel",
          () => simulator.jobs().find((j) => j.id === before.provider_task_id)?.canceledAt != null
        )
        const job = simulator.jobs().find((j) => j.id === before.provider_task_id)!
        // on its own the task would have woken TASK_WAKE_LEAD (100 ms) before its next poll: the cancel woke it
        expect(job.canceledAt!).toBeLessThan(before.next_poll_at!.getTime() - 1000)
        yield* waitForStatus([t.taskId], ["canceled"], Duration.seconds(30))
      }))
  })
})
