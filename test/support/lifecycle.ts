import { SqlClient } from "@effect/sql"
import { Duration, Effect, Schedule } from "effect"
import { TaskClient } from "../../src/entities/TaskClient.js"
import { Projects } from "../../src/persistence/Projects.js"
import { TaskAdmission } from "../../src/persistence/TaskAdmission.js"
import { definitionOf } from "../../src/providers/providers.js"
import type { AttemptId, ProjectId, ProviderName, TaskId, TenantId, UserId } from "../../src/schema/ids.js"
import { scaledDuration } from "./env.js"
import { uuid } from "./tasks.js"

/** Admits a task for a simulated provider and wakes its entity, as the API does. */
export const startTask = (
  provider: string,
  options: { readonly tenantId?: string; readonly model?: string } = {}
) =>
  Effect.gen(function*() {
    const admission = yield* TaskAdmission
    const tenantId = (options.tenantId ?? uuid()) as TenantId
    const projectId = uuid() as ProjectId
    yield* (yield* Projects).ensure(tenantId, projectId)
    const { task } = yield* admission.admit({
      tenantId,
      projectId,
      userId: uuid() as UserId,
      idempotencyKey: uuid(),
      requestHash: "h",
      request: { prompt: "a lighthouse at dusk", duration_seconds: 4 },
      provider: provider as ProviderName,
      // a model the provider's definition (and the simulator) accepts
      model: options.model ?? definitionOf(provider)?.exampleModel ?? "sim-video",
      reserveAmount: 4,
      traceId: "test"
    })
    const tasks = yield* TaskClient
    yield* tasks.send(task.id, (c) => c.Start({ traceId: "test" }))
    return { taskId: task.id as TaskId, attemptId: task.currentAttemptId as AttemptId, provider }
  }).pipe(Effect.orDie)

export const statuses = (ids: ReadonlyArray<string>) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ id: string; status: string; asset_id: string | null }>`
      SELECT id, status, asset_id FROM generation_tasks WHERE id IN ${sql.in(ids)}`).pipe(Effect.orDie)

/** Waits until every task is in one of `wanted`; fails with the stragglers' states after `within`. */
export const waitForStatus = (ids: ReadonlyArray<string>, wanted: ReadonlyArray<string>, within: Duration.Duration) =>
  Effect.gen(function*() {
    const rows = yield* statuses(ids)
    const pending = rows.filter((r) => !wanted.includes(r.status))
    if (pending.length > 0 || rows.length < ids.length) {
      return yield* Effect.fail(`${pending.length} not yet ${wanted.join("|")}: ${pending.map((p) => p.status)}`)
    }
    return rows
  }).pipe(Effect.retry(Schedule.spaced(Duration.millis(200)).pipe(Schedule.upTo(scaledDuration(within)))))

/**
 * Every task's ledger: exactly one reserve, and for a terminal task exactly one settlement of the same amount,
 * a settle when ready, a refund when failed or canceled.
 */
export const ledgers = (ids: ReadonlyArray<string>) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{ id: string; status: string; reserves: number; settles: number; refunds: number; balance: number }>`
      SELECT t.id, t.status,
        count(*) FILTER (WHERE l.ledger_type = 'reserve')::int AS reserves,
        count(*) FILTER (WHERE l.ledger_type = 'settle')::int AS settles,
        count(*) FILTER (WHERE l.ledger_type = 'refund')::int AS refunds,
        COALESCE(sum(CASE WHEN l.ledger_type = 'reserve' THEN l.amount ELSE -l.amount END), 0)::float AS balance
      FROM generation_tasks t LEFT JOIN credit_ledger l ON l.task_id = t.id
      WHERE t.id IN ${sql.in(ids)} GROUP BY t.id, t.status`
  ).pipe(Effect.orDie)

export const expectBalanced = (
  rows: ReadonlyArray<{ status: string; reserves: number; settles: number; refunds: number; balance: number }>,
  expect: (v: unknown) => any
) => {
  for (const r of rows) {
    expect({ reserves: r.reserves, balance: r.balance }).toEqual({ reserves: 1, balance: 0 })
    expect({ status: r.status, settles: r.settles, refunds: r.refunds }).toEqual({
      status: r.status,
      settles: r.status === "ready" ? 1 : 0,
      refunds: r.status === "ready" ? 0 : 1
    })
  }
}
