import { FetchHttpClient } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { afterAll, describe, expect, layer } from "@effect/vitest"
import { Duration, Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import type { TaskId } from "../../src/schema/ids.js"
import { simulatorEnv } from "../../src/simulator/embedded.js"
import { adminClient } from "../support/admin.js"
import { layerTestDatabase, noDatabase } from "../support/database.js"
import { scaled } from "../support/env.js"
import { expectBalanced, ledgers, startTask, waitForStatus } from "../support/lifecycle.js"
import { freePort, layerTestRunner, quietLogs, withSettings } from "../support/runner.js"
import { layerRunnerHttp, layerSim, Sim } from "../support/simulator.js"
import { admitTask, uuid } from "../support/tasks.js"
import { eventually, openaiEvent } from "../support/webhooks.js"

const [httpPort, simPort] = await Effect.runPromise(Effect.all([freePort, freePort]))
const platform = `http://127.0.0.1:${httpPort}`
const sim = `http://127.0.0.1:${simPort}`
const objects = fs.mkdtempSync(path.join(os.tmpdir(), "review-objects-"))
afterAll(() => fs.rmSync(objects, { recursive: true, force: true }))

const settings = {
  ...simulatorEnv(platform, sim, ["openai", "replicate"]),
  POLL_INTERVAL_SCALE: "0.05",
  PROVIDER_TIMEOUT: "1 second",
  OBJECT_STORE_DIR: objects,
  REDIS_KEY_PREFIX: `test-${uuid()}:`,
  SUBMIT_UNKNOWN_GRACE: "1 second",
  // OpenAI has no lookup here: an unknown submit waits this long for a callback, then goes to manual review
  SUBMIT_UNKNOWN_DEADLINE: "2 seconds",
  REPLICATE_LOOKUP: "true",
  RECONCILE_INTERVAL: "1 second",
  // only the reconciler wakes tasks nobody drives in these tests
  SWEEP_INTERVAL: "1 hour"
}

const TestLayer = layerSim(simPort, platform).pipe(
  Layer.provideMerge(
    layerRunnerHttp(httpPort).pipe(Layer.provideMerge(layerTestRunner(layerTestDatabase(), { lifecycle: true })))
  ),
  Layer.provide(FetchHttpClient.layer),
  Layer.provide(quietLogs),
  Layer.provide(withSettings(settings))
)

const NOT_UNKNOWN = ["queued", "submitting", "submitted", "running", "provider_succeeded", "fetching_output"]

describe.skipIf(noDatabase)("manual review, reconciliation and replays through the admin API", () => {
  layer(TestLayer, { timeout: scaled(120_000), excludeTestServices: true })((it) => {
    it.effect("an unknown submit in review holds no slot; resolving it refunds the reserve through the entity", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const simulator = yield* Sim
        const admin = yield* adminClient(platform)
        // the provider takes the job but the answer is lost, and no callback comes: nothing can resolve it
        yield* simulator.setFaults({ jobDurationMs: 60_000, dropWebhooks: 1, submitAcceptThenTimeout: 1 })
        const t = yield* startTask("openai")
        yield* waitForStatus([t.taskId], ["manual_review"], Duration.seconds(30))
        yield* simulator.setFaults({ submitAcceptThenTimeout: 0 })

        // the slot it took to submit is free (it used to be held until someone resolved the task)
        const [slots] = yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM submission_slots WHERE attempt_id = ${t.attemptId}`
        expect(slots!.n).toBe(0)

        const { tasks } = yield* admin.operations.review({ urlParams: {} })
        expect(tasks.find((r) => r.task_id === t.taskId)).toMatchObject({
          provider: "openai",
          reason: "submit_unknown"
        })

        // no provider output is known: it cannot be made ready by decree
        const ready = yield* admin.operations.resolveReview({
          path: { task: t.taskId },
          payload: { as: "ready", reason: "test" }
        }).pipe(Effect.either)
        expect(ready._tag === "Left" && ready.left._tag).toBe("OperationRefused")

        const before =
          (yield* sql<{ version: number }>`SELECT version FROM generation_tasks WHERE id = ${t.taskId}`)[0]!
        const resolved = yield* admin.operations.resolveReview({
          path: { task: t.taskId },
          payload: { as: "failed", reason: "provider support: no such job" }
        })
        expect(resolved).toMatchObject({ task_id: t.taskId, status: "failed", version: before.version + 1 })
        // through the entity: a versioned event from the operator, its outbox row, and the ledger's refund
        const [event] = yield* sql<{ source: string; status: string; outbox: number }>`
          SELECT e.source, e.public_payload->>'status' AS status,
            (SELECT count(*)::int FROM outbox_events o WHERE o.event_id = e.event_id) AS outbox
          FROM task_events e WHERE e.task_id = ${t.taskId} AND e.task_version = ${resolved.version}`
        expect(event).toEqual({ source: "operator", status: "failed", outbox: 1 })
        expectBalanced(yield* ledgers([t.taskId]), expect)
        expect((yield* ledgers([t.taskId]))[0]).toMatchObject({ refunds: 1, settles: 0 })

        const again = yield* admin.operations.resolveReview({
          path: { task: t.taskId },
          payload: { as: "canceled", reason: "twice" }
        }).pipe(Effect.either)
        expect(again._tag === "Left" && again.left._tag).toBe("OperationRefused")
        const { changes } = yield* admin.operations.audit()
        expect(changes[0]).toMatchObject({
          operator: "ops-test",
          what: `review.resolve ${t.taskId}`,
          from: "manual_review",
          to: "failed",
          reason: "provider support: no such job"
        })
      }))

    it.effect("600 tasks in review do not starve newer unknown submits", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const simulator = yield* Sim
        yield* simulator.setFaults({ jobDurationMs: 60_000, dropWebhooks: 1, submitAcceptThenTimeout: 0 })
        const first = yield* admitTask({ provider: "replicate" })
        const [{ project_id, tenant_id }] = (yield* sql<{ project_id: string; tenant_id: string }>`
          SELECT project_id, tenant_id FROM generation_tasks WHERE id = ${first.taskId}`) as [
          { project_id: string; tenant_id: string }
        ]
        // 600 unknown submits an hour old, waiting for a human (older than any other unknown submit)
        yield* sql`
          WITH t AS (
            INSERT INTO generation_tasks (id, tenant_id, project_id, user_id, idempotency_key, request_hash, request,
              status, stage, version, last_seq, current_attempt_id, home_region, write_epoch, updated_at)
            SELECT gen_random_uuid(), ${tenant_id}, ${project_id}, gen_random_uuid(), 'review-' || g, 'h', '{}',
              'manual_review', 'queued', 3, 0, gen_random_uuid(), 'local', 1, now() - interval '1 hour'
            FROM generate_series(1, 600) g
            RETURNING id, current_attempt_id)
          INSERT INTO task_attempts (id, task_id, attempt_no, provider, model, client_request_id, submit_state,
            unknown_since, submit_started_at)
          SELECT current_attempt_id, id, 1, 'replicate', 'kwaivgi/kling-v2.1', gen_random_uuid()::text,
            'SUBMIT_UNKNOWN', now() - interval '1 hour', now() - interval '1 hour'
          FROM t`
        // newer unknown submits, whose entities nobody runs (a restart lost them): only the reconciler wakes them
        const newer = [first, yield* admitTask({ provider: "replicate" }), yield* admitTask({ provider: "replicate" })]
        const ids = newer.map((n) => n.taskId as TaskId)
        yield* sql`UPDATE generation_tasks SET status = 'submit_unknown' WHERE id IN ${sql.in(ids)}`
        yield* sql`
          UPDATE task_attempts SET submit_state = 'SUBMIT_UNKNOWN', unknown_since = now() - interval '10 minutes',
            submit_started_at = now() - interval '10 minutes'
          WHERE task_id IN ${sql.in(ids)}`
        // woken, each asks the provider by its key, learns it has nothing, and submits a new attempt
        yield* waitForStatus(ids, NOT_UNKNOWN, Duration.seconds(40))
        const [review] = yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM generation_tasks WHERE status = 'manual_review'`
        expect(review!.n).toBeGreaterThanOrEqual(600)
      }))

    it.effect("dead inbox rows and dead-lettered notifications are listed and replayed", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const simulator = yield* Sim
        const admin = yield* adminClient(platform)
        yield* simulator.setFaults({ jobDurationMs: 60_000, dropWebhooks: 1, submitAcceptThenTimeout: 0 })
        const t = yield* startTask("openai")
        yield* waitForStatus([t.taskId], ["submitted", "running"], Duration.seconds(20))
        const [{ job }] = (yield* sql<{ job: string }>`
          SELECT provider_task_id AS job FROM task_attempts WHERE id = ${t.attemptId}`) as [{ job: string }]
        // a provider's failure report that an earlier processor gave up on (a fenced window used to do this)
        const body = openaiEvent(job, "video.failed")
        const [dead] = yield* sql<{ id: number }>`
          INSERT INTO provider_callback_inbox (provider, dedup_key, provider_task_id, payload_hash, payload, body,
            process_status, retry_count, next_retry_at, last_error_code, last_error)
          VALUES ('openai', ${uuid()}, ${job}, '\\x00', ${body}::jsonb, ${body}, 'dead', 50, NULL, 'WriteFenced',
            'retries exhausted')
          RETURNING id`
        const listed = yield* admin.operations.inboxDead()
        expect(listed.rows.find((r) => r.id === dead!.id)).toMatchObject({ provider: "openai", attempts: 50 })
        const replay = yield* admin.operations.inboxReplay({ payload: { id: String(dead!.id), which: "dead" } })
        expect(replay.replayed).toBe(1)
        yield* waitForStatus([t.taskId], ["failed"], Duration.seconds(20))
        yield* eventually(
          sql<{ process_status: string }>`SELECT process_status FROM provider_callback_inbox WHERE id = ${dead!.id}`,
          (rows) => rows[0]?.process_status === "processed"
        )
        const missing = yield* admin.operations.inboxReplay({ payload: { id: "999999999", which: "dead" } }).pipe(
          Effect.either
        )
        expect(missing._tag === "Left" && missing.left._tag).toBe("NotFound")

        // a notification the dispatcher gave up on (the bus was down)
        const [letter] = yield* sql<{ id: number }>`
          INSERT INTO notification_dead_letters (event_id, task_id, body, error, attempts)
          SELECT event_id::text, aggregate_id::text, payload::text, 'test: bus down', 10 FROM outbox_events
          WHERE aggregate_id = ${t.taskId} ORDER BY id DESC LIMIT 1
          RETURNING id`
        const letters = yield* admin.operations.deadLetters()
        expect(letters.rows.find((r) => r.id === letter!.id)).toMatchObject({ task_id: t.taskId, attempts: 10 })
        expect((yield* admin.operations.deadLettersReplay({ payload: { id: letter!.id } })).replayed).toBe(1)
        expect((yield* admin.operations.deadLetters()).rows.some((r) => r.id === letter!.id)).toBe(false)
        const [replayed] = yield* sql<{ replayed: boolean }>`
          SELECT replayed_at IS NOT NULL AS replayed FROM notification_dead_letters WHERE id = ${letter!.id}`
        expect(replayed!.replayed).toBe(true)
      }))
  })
})
