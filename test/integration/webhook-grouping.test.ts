import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer, Metric } from "effect"
import { groupCommitBatchSize } from "../../src/observability/metrics.js"
import { layerHttpTest } from "../../src/testing/TestRunner.js"
import { layerTestDatabase, noDatabase } from "../support/database.js"
import { scaled } from "../support/env.js"
import { layerTestRunner, quietLogs, withSettings } from "../support/runner.js"
import { uuid } from "../support/tasks.js"
import { OPENAI_TEST_SECRET, openaiEvent, openAISigner, post } from "../support/webhooks.js"

const TestLayer = layerHttpTest.pipe(
  Layer.provideMerge(layerTestRunner(layerTestDatabase())),
  Layer.provide(quietLogs),
  // the gateway alone: rows stay as stored, nothing processes them
  Layer.provide(withSettings({ OPENAI_WEBHOOK_SECRET: OPENAI_TEST_SECRET, INBOX_PROCESSOR_ENABLED: "false" }))
)

const signOpenAI = openAISigner(OPENAI_TEST_SECRET)

/** Inbox rows whose dedup key is one of `ids`' (a Standard Webhooks callback's key is its webhook-id). */
const rowsOf = (ids: ReadonlyArray<string>) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ dedup_key: string; n: number }>`
      SELECT dedup_key, count(*)::int AS n FROM provider_callback_inbox
      WHERE provider = 'openai' AND dedup_key IN ${sql.in(ids.map((id) => `id:${id}`))}
      GROUP BY dedup_key`).pipe(Effect.orDie)

const inboxStatements = Effect.map(
  Metric.value(Metric.tagged(groupCommitBatchSize, "writer", "inbox")),
  (h) => ({ statements: h.count, rows: h.sum })
)

interface Sent {
  readonly id: string
  readonly body: string
  readonly headers: Record<string, string>
}

const signed = (videoId: string): Sent => {
  const body = openaiEvent(videoId)
  const id = `msg_${uuid()}`
  return { id, body, headers: signOpenAI(body, { id }) }
}

describe.skipIf(noDatabase)("webhooks share their inbox INSERTs, and each is answered after its own row", () => {
  layer(TestLayer, { timeout: scaled(120_000), excludeTestServices: true })((it) => {
    it.effect("300 concurrent webhooks (and 100 duplicates): every 204 finds its row, each stored once, through the grouped writer", () =>
      Effect.gen(function*() {
        const unique = Array.from({ length: 300 }, () => signed(`video_${uuid()}`))
        const requests = [...unique, ...unique.slice(0, 100)].sort(() => Math.random() - 0.5)
        const before = yield* inboxStatements
        const answers = yield* Effect.forEach(
          requests,
          (r) =>
            Effect.gen(function*() {
              const res = yield* post("/webhooks/openai", r.body, r.headers)
              // read at once after the answer: a 204 sent before its commit would find nothing here
              const rows = res.status === 204 ? yield* rowsOf([r.id]) : []
              return { status: res.status, rowsSeen: rows[0]?.n ?? 0 }
            }),
          { concurrency: 64 }
        )
        expect(answers.filter((a) => a.status !== 204)).toEqual([])
        expect(answers.filter((a) => a.rowsSeen !== 1)).toEqual([])
        const rows = yield* rowsOf(unique.map((u) => u.id))
        expect(rows).toHaveLength(300)
        expect(rows.every((r) => r.n === 1)).toBe(true)
        // every callback went through the grouped writer (how many share a statement depends on the machine's speed:
        // webhook-bodies.test.ts holds the writer on a lock to show a batch of 21 written as one)
        expect((yield* inboxStatements).rows - before.rows).toBe(400)
      }))

    it.effect("an INSERT that fails is never a 204: its callback is refused (503), its batch-mates are stored", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        // PostgreSQL refuses the rows of one video: every statement carrying one of them fails
        yield* sql.unsafe(`
          CREATE OR REPLACE FUNCTION refuse_poison() RETURNS trigger AS $$
          BEGIN
            IF NEW.provider_task_id LIKE 'poison_%' THEN RAISE EXCEPTION 'refused by the test'; END IF;
            RETURN NEW;
          END $$ LANGUAGE plpgsql`).pipe(Effect.orDie)
        yield* sql.unsafe(`
          CREATE OR REPLACE TRIGGER refuse_poison BEFORE INSERT ON provider_callback_inbox
          FOR EACH ROW EXECUTE FUNCTION refuse_poison()`).pipe(Effect.orDie)
        const poisoned = Array.from({ length: 5 }, () => signed(`poison_${uuid()}`))
        const goods = Array.from({ length: 95 }, () => signed(`video_${uuid()}`))
        const requests = [...poisoned, ...goods].sort(() => Math.random() - 0.5)
        const answers = yield* Effect.forEach(
          requests,
          (r) => Effect.map(post("/webhooks/openai", r.body, r.headers), (res) => [r.id, res.status] as const),
          { concurrency: 64 }
        )
        const status = new Map(answers)
        yield* sql.unsafe("DROP TRIGGER refuse_poison ON provider_callback_inbox").pipe(Effect.orDie)
        expect(poisoned.map((p) => status.get(p.id))).toEqual(poisoned.map(() => 503))
        expect(goods.filter((g) => status.get(g.id) !== 204)).toEqual([])
        expect(yield* rowsOf(poisoned.map((p) => p.id))).toEqual([])
        expect(yield* rowsOf(goods.map((g) => g.id))).toHaveLength(95)
      }))
  })
})
