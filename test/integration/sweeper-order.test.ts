import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { duePage, type DueRow } from "../../src/entities/Sweeper.js"
import { MigrationsLive } from "../../src/persistence/Database.js"
import { layerTestDatabase, noDatabase } from "../support/database.js"
import { scaled } from "../support/env.js"

/** `n` tasks last changed `minutesAgo` minutes ago: running, their poll due then; or queued (`queued`). */
const insert = (n: number, minutesAgo: number, queued = false) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ id: string }>`
      WITH p AS (
        INSERT INTO projects (project_id, tenant_id, stream_epoch)
        VALUES (gen_random_uuid(), gen_random_uuid(), 1) RETURNING project_id, tenant_id
      ), j AS (
        SELECT gen_random_uuid() AS task, gen_random_uuid() AS attempt, now() - make_interval(mins => ${minutesAgo}) AS at
        FROM generate_series(1, ${n})
      ), t AS (
        INSERT INTO generation_tasks (id, tenant_id, project_id, user_id, idempotency_key, request_hash, request,
          status, stage, version, last_seq, current_attempt_id, home_region, write_epoch, updated_at)
        SELECT task, p.tenant_id, p.project_id, gen_random_uuid(), task::text, 'h', '{}',
          ${queued ? "queued" : "running"}, ${queued ? "queued" : "generating"}, 1, 0, attempt, 'local', 1, at
        FROM j, p RETURNING id
      )
      INSERT INTO task_attempts (id, task_id, attempt_no, provider, model, client_request_id, provider_task_id,
        submit_state, next_poll_at)
      SELECT attempt, task, 1, 'runway', 'gen4.5', attempt::text,
        ${queued ? sql`NULL` : sql`'job-' || attempt::text`}, ${queued ? "PREPARED" : "RUNNING"},
        ${queued ? sql`NULL` : sql`at`}
      FROM j RETURNING task_id AS id`).pipe(Effect.orDie)

describe.skipIf(noDatabase)("the sweeper's order", () => {
  it.layer(MigrationsLive.pipe(Layer.provideMerge(layerTestDatabase())), { timeout: scaled(60_000) })((it) => {
    it.effect("own steps first, then overdue polls; each page goes on after the last, to the end and round", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        // polls due 10 minutes ago (past SWEEP_GRACE + QUOTA_MAX_WAIT), queued tasks last changed 1 minute ago
        yield* insert(5, 10)
        const queued = yield* insert(2, 1, true)
        const page = duePage(sql, { batch: 3, graceSeconds: 10, pollGraceSeconds: 70 })
        const seen: Array<ReadonlyArray<DueRow>> = []
        let after: DueRow | null = null
        for (let i = 0; i < 4; i++) {
          const rows: ReadonlyArray<DueRow> = yield* page(after)
          seen.push(rows)
          after = rows.length < 3 ? null : rows[rows.length - 1]!
        }
        // first the queued tasks, then the polls, 3 at a time; every due task woken once before any twice
        expect(seen[0]!.slice(0, 2).map((r) => r.own)).toEqual([true, true])
        expect(new Set(seen[0]!.slice(0, 2).map((r) => r.id))).toEqual(new Set(queued.map((q) => q.id)))
        const firstRound = [...seen[0]!, ...seen[1]!, ...seen[2]!].map((r) => r.id)
        expect(firstRound.length).toBe(7)
        expect(new Set(firstRound).size).toBe(7)
        // a short page ended the round: the next starts from the first again
        expect(seen[2]!.length).toBe(1)
        expect(seen[3]!.map((r) => r.id)).toEqual(seen[0]!.map((r) => r.id))
      }))
  })
})
