import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { layerTestDatabase, noDatabase } from "../support/database.js"
import { scaled } from "../support/env.js"
import { layerTestRunner, quietLogs, withSettings } from "../support/runner.js"
import { admitTask, uuid } from "../support/tasks.js"
import { eventually } from "../support/webhooks.js"

const TestLayer = layerTestRunner(layerTestDatabase()).pipe(
  Layer.provide(quietLogs),
  Layer.provide(withSettings({ RECONCILE_INTERVAL: "300 millis", TASK_EXPECTED_MAX_DURATION: "1 hour" }))
)

describe.skipIf(noDatabase)("reconcilers (a cluster singleton)", () => {
  layer(TestLayer, { timeout: scaled(60_000), excludeTestServices: true })((it) => {
    it.effect("a terminal task whose reserve was never settled gets exactly one settlement of the reserve", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        // terminal states written outside the commit function (a task from before the rule, a manual repair)
        const ready = yield* admitTask()
        const failed = yield* admitTask()
        yield* sql`UPDATE generation_tasks SET status = 'ready', terminal_at = now() WHERE id = ${ready.taskId}`
        yield* sql`UPDATE generation_tasks SET status = 'failed', terminal_at = now() WHERE id = ${failed.taskId}`
        const ledger = (taskId: string) =>
          sql<{ ledger_type: string; amount: string }>`
            SELECT ledger_type, amount::text FROM credit_ledger WHERE task_id = ${taskId} ORDER BY id`
        yield* eventually(ledger(ready.taskId), (rows) => rows.length === 2)
        yield* eventually(ledger(failed.taskId), (rows) => rows.length === 2)
        // more rounds change nothing: another such task settled is a round that has come after
        const sentinel = yield* admitTask()
        yield* sql`UPDATE generation_tasks SET status = 'ready', terminal_at = now() WHERE id = ${sentinel.taskId}`
        yield* eventually(ledger(sentinel.taskId), (rows) => rows.length === 2)
        expect((yield* ledger(ready.taskId)).map((r) => [r.ledger_type, Number(r.amount)])).toEqual([
          ["reserve", 5],
          ["settle", 5]
        ])
        expect((yield* ledger(failed.taskId)).map((r) => r.ledger_type)).toEqual(["reserve", "refund"])
        // the database itself refuses a second settlement, whatever the writer
        const second = yield* sql`
          INSERT INTO credit_ledger (tenant_id, task_id, attempt_id, ledger_type, amount)
          SELECT tenant_id, id, NULL, 'refund', 5 FROM generation_tasks WHERE id = ${ready.taskId}`.pipe(Effect.either)
        expect(second._tag).toBe("Left")
      }))

    it.effect("a task past its expected duration is recorded once for reconciliation", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const t = yield* admitTask()
        yield* sql`UPDATE generation_tasks SET created_at = now() - interval '2 hours' WHERE id = ${t.taskId}`
        const records = sql<{ reason: string }>`SELECT reason FROM task_reconciliations WHERE task_id = ${t.taskId}`
        yield* eventually(records, (rows) => rows.length === 1)
        // another overdue task recorded is a round that has come after
        const sentinel = yield* admitTask()
        yield* sql`UPDATE generation_tasks SET created_at = now() - interval '2 hours' WHERE id = ${sentinel.taskId}`
        yield* eventually(
          sql<{ n: number }>`SELECT count(*)::int AS n FROM task_reconciliations WHERE task_id = ${sentinel.taskId}`,
          ([r]) => r!.n === 1
        )
        expect((yield* records).map((r) => r.reason)).toEqual(["overdue"])
      }))

    it.effect("an orphan callback is retried as soon as its attempt becomes known", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const t = yield* admitTask()
        const job = `job-${uuid()}`
        yield* sql`
          INSERT INTO provider_callback_inbox (provider, dedup_key, provider_task_id, payload_hash, payload,
            process_status, retry_count, next_retry_at)
          VALUES ('simulator', ${uuid()}, ${job}, '\\x00', '{}', 'orphan', 9, now() + interval '1 hour')`
        yield* sql`UPDATE task_attempts SET provider_task_id = ${job} WHERE id = ${t.attemptId}`
        // adopted by the reconciler, then handled by the inbox processor (here: a body it cannot read)
        yield* eventually(
          sql<
            { process_status: string }
          >`SELECT process_status FROM provider_callback_inbox WHERE provider_task_id = ${job}`,
          (rows) => rows[0]?.process_status !== "orphan"
        )
      }))
  })
})
