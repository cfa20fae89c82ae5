import { FetchHttpClient } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Duration, Effect, Layer, Option, Schedule } from "effect"
import { ProviderClients } from "../../src/providers/ProviderClients.js"
import { definitionOf } from "../../src/providers/providers.js"
import { simulatorEnv } from "../../src/simulator/embedded.js"
import { layerTestDatabase, noDatabase } from "../support/database.js"
import { scaled, scaledDuration } from "../support/env.js"
import { freePort, layerTestRunner, quietLogs, withSettings } from "../support/runner.js"
import { layerRunnerHttp, layerSim, Sim } from "../support/simulator.js"
import { admitTask } from "../support/tasks.js"

const [httpPort, simPort] = await Effect.runPromise(Effect.all([freePort, freePort]))
const platform = `http://127.0.0.1:${httpPort}`
const sim = `http://127.0.0.1:${simPort}`
// Luma is not here: its callbacks are unsigned, so an outcome they claim only wakes a poll of the task's lifecycle,
// which this runner does not run (output-ssrf.test.ts and lifecycle.test.ts take Luma to its end)
const PROVIDERS = ["openai", "replicate", "fal"] as const
const settings = simulatorEnv(platform, sim, PROVIDERS)

const SimLive = layerSim(simPort, platform)
const RunnerHttp = layerRunnerHttp(httpPort)

const TestLayer = Layer.mergeAll(SimLive, ProviderClients.Default).pipe(
  Layer.provideMerge(RunnerHttp.pipe(Layer.provideMerge(layerTestRunner(layerTestDatabase())))),
  Layer.provide(FetchHttpClient.layer),
  Layer.provide(quietLogs),
  Layer.provide(withSettings(settings))
)

const expected = { succeeded: "provider_succeeded", failed: "failed", canceled: "canceled" } as const

describe.skipIf(noDatabase)("provider intake end to end with the simulator", () => {
  layer(TestLayer, { timeout: scaled(120_000), excludeTestServices: true })((it) => {
    it.effect("duplicated, reordered and dropped webhooks: every task converges to the simulator's truth", () =>
      Effect.gen(function*() {
        const simulator = yield* Sim
        yield* simulator.setFaults({
          jobDurationMs: 1200,
          outcomes: { succeeded: 0.7, failed: 0.3, canceled: 0 },
          duplicateWebhooks: 0.4,
          dropWebhooks: 0.3,
          reorderWindowMs: 400,
          webhookRetryDelayMs: 300
        })
        const clients = yield* ProviderClients
        const sql = yield* SqlClient.SqlClient

        const tasks = yield* Effect.forEach(Array.from({ length: 32 }), (_, i) =>
          Effect.gen(function*() {
            const provider = PROVIDERS[i % PROVIDERS.length]!
            const t = yield* admitTask({ provider })
            const [attempt] = yield* sql<{ client_request_id: string }>`
              SELECT client_request_id FROM task_attempts WHERE id = ${t.attemptId}`
            const client = Option.getOrThrow(clients.get(provider))
            const { providerTaskId } = yield* client.submit({
              attemptId: t.attemptId,
              clientRequestId: attempt!.client_request_id,
              model: definitionOf(provider)!.exampleModel,
              prompt: `task ${i}`,
              durationSeconds: 4,
              resolution: "720p"
            })
            // stands in for the lifecycle's submitter (next issue): record the provider's id on the attempt;
            // callbacks that arrive before this are orphans and wait
            yield* sql`UPDATE task_attempts SET provider_task_id = ${providerTaskId}, submit_state = 'SUBMITTED'
                       WHERE id = ${t.attemptId}`
            return { ...t, provider, key: attempt!.client_request_id }
          }), { concurrency: 8 })

        const truth = () => new Map(simulator.jobs().map((j) => [j.clientKey, j.outcome]))
        yield* Effect.gen(function*() {
          const rows = yield* sql<{ id: string; status: string }>`
            SELECT id, status FROM generation_tasks WHERE id IN ${sql.in(tasks.map((t) => t.taskId))}`
          const status = new Map(rows.map((r) => [r.id, r.status]))
          const outcomes = truth()
          const pending = tasks.filter((t) => status.get(t.taskId) !== expected[outcomes.get(t.key)!])
          if (pending.length > 0) return yield* Effect.fail(`${pending.length} tasks not converged`)
        }).pipe(
          Effect.retry(Schedule.spaced(Duration.millis(250)).pipe(Schedule.upTo(scaledDuration(Duration.seconds(60)))))
        )

        // one generation per task, and the faults really happened
        for (const t of tasks) expect(simulator.submissions(t.key)).toBe(1)
        expect(simulator.stats.webhooksDuplicated).toBeGreaterThan(0)
        expect(simulator.stats.webhooksDropped).toBeGreaterThan(0)
        // every transition is in order: versions have no holes and no task event repeats a version
        const versions = yield* sql<{ task_id: string; n: number; max: number }>`
          SELECT task_id, count(*)::int AS n, max(task_version)::int AS max FROM task_events
          WHERE task_id IN ${sql.in(tasks.map((t) => t.taskId))} GROUP BY task_id`
        for (const v of versions) expect(v.n).toBe(v.max)
      }))
  })
})
