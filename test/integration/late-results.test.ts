import { FetchHttpClient } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer, Metric, Option } from "effect"
import { retrySubmission } from "../../src/domain/lifecycleSteps.js"
import { lateAttemptResults } from "../../src/observability/metrics.js"
import { TaskStore } from "../../src/persistence/TaskStore.js"
import { adminClient, runOps } from "../support/admin.js"
import { layerTestDatabase, noDatabase } from "../support/database.js"
import { scaled } from "../support/env.js"
import { freePort, layerTestRunner, quietLogs, withSettings } from "../support/runner.js"
import { layerRunnerHttp } from "../support/simulator.js"
import { admitTask, uuid } from "../support/tasks.js"
import { eventually, OPENAI_TEST_SECRET, openaiEvent, openAISigner, post, taskRow } from "../support/webhooks.js"

const httpPort = await Effect.runPromise(freePort)
const platform = `http://127.0.0.1:${httpPort}`
const AUTH_SECRET = "late-results-test-secret-0123456789abcdef"
const settings = { OPENAI_WEBHOOK_SECRET: OPENAI_TEST_SECRET, INBOX_SWEEP_INTERVAL: "200 millis", AUTH_SECRET }

const TestLayer = layerRunnerHttp(httpPort).pipe(
  Layer.provideMerge(layerTestRunner(layerTestDatabase())),
  Layer.provideMerge(FetchHttpClient.layer),
  Layer.provide(quietLogs),
  Layer.provide(withSettings(settings))
)

const signOpenAI = openAISigner(OPENAI_TEST_SECRET)

const recordedCount = Metric.value(
  Metric.tagged(
    Metric.tagged(Metric.tagged(lateAttemptResults, "provider", "openai"), "status", "succeeded"),
    "outcome",
    "recorded"
  )
).pipe(Effect.map((s) => s.count))

/**
 * A task whose first attempt was superseded (the provider said it had no job: a retry with a new attempt), then whose
 * first job turns out to exist after all and finishes: its webhook must not touch the task, and is kept once.
 */
const supersededTask = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const store = yield* TaskStore
  const first = yield* admitTask({ provider: "openai" })
  const state = Option.getOrThrow(yield* store.load(first.taskId))
  const retry = retrySubmission(state, first.attemptId, 3, "provider_failed", new Date(), {
    source: "reconcile",
    traceId: "retry-trace"
  })
  if (retry._tag !== "Changed") return yield* Effect.dieMessage(`no retry: ${retry._tag}`)
  const committed = yield* store.commit(state.task, retry.change)
  if (committed._tag !== "Committed") return yield* Effect.dieMessage("retry not committed")
  // the provider's id of the first job, learned only after it was superseded
  const oldJob = `video_${uuid()}`
  yield* sql`UPDATE task_attempts SET provider_task_id = ${oldJob} WHERE id = ${first.attemptId}`
  return { ...first, oldJob, current: committed.task }
})

describe.skipIf(noDatabase)("late results of superseded attempts", () => {
  layer(TestLayer, { timeout: scaled(120_000), excludeTestServices: true })((it) => {
    it.effect("a superseded attempt's terminal webhook leaves the task alone and is recorded once, listed by ops", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const t = yield* supersededTask
        expect(t.current.currentAttemptId).not.toBe(t.attemptId)
        const before = yield* recordedCount

        // delivered twice, as two distinct provider events (two inbox rows: the inbox's own dedup does not hide it)
        for (let i = 0; i < 2; i++) {
          const body = openaiEvent(t.oldJob)
          expect((yield* post(`${platform}/webhooks/openai`, body, signOpenAI(body))).status).toBe(204)
        }
        yield* eventually(
          sql<{ n: number }>`
            SELECT count(*)::int AS n FROM provider_callback_inbox
            WHERE provider_task_id = ${t.oldJob} AND process_status = 'processed'`,
          (rows) => rows[0]!.n === 2
        )

        const rows = yield* sql<Record<string, unknown>>`
          SELECT task_id, attempt_id, attempt_no, provider, provider_task_id, model, status, source, trace_id
          FROM late_attempt_results WHERE task_id = ${t.taskId}`
        expect(rows).toHaveLength(1)
        expect(rows[0]).toMatchObject({
          task_id: t.taskId,
          attempt_id: t.attemptId,
          attempt_no: 1,
          provider: "openai",
          provider_task_id: t.oldJob,
          model: expect.any(String),
          status: "succeeded",
          source: "webhook"
        })
        expect(String(rows[0]!.trace_id)).toMatch(/^[0-9a-f]{32}$/)
        expect((yield* recordedCount) - before).toBe(1)

        // the task did not move: same status and version as right after the retry
        expect(yield* taskRow(t.taskId)).toEqual({ status: t.current.status, version: t.current.version })

        // the admin API and the ops CLI list it
        const admin = yield* adminClient(platform)
        const listed = yield* admin.lateResults.list({ urlParams: { provider: "openai" } })
        expect(listed.rows.filter((r) => r.task_id === t.taskId)).toHaveLength(1)
        const none = yield* admin.lateResults.list({ urlParams: { since: new Date(Date.now() + 60_000) } })
        expect(none.rows).toEqual([])

        const out = yield* runOps(["late-results", "--provider", "openai"], { OPS_URL: platform, AUTH_SECRET })
        expect(out.stderr).toBe("")
        expect(out.code).toBe(0)
        const line = out.stdout.split("\n").find((l) => l.includes(t.taskId))
        expect(line).toContain("succeeded")
        expect(line).toContain(t.oldJob)
        expect(line).toContain("attempt #1")
        const bad = yield* runOps(["late-results", "--since", "yesterday"], { OPS_URL: platform, AUTH_SECRET })
        expect(bad.code).toBe(1)
        expect(bad.stderr).toContain("not an ISO 8601 time")
      }))
  })
})
