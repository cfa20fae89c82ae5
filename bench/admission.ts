/**
 * npm run bench:admission — what a task's admission (the write behind POST /v1/projects/:project/tasks:
 * TaskAdmission.admit, one transaction) costs, beside its ceiling in the same run: the same statements with the same
 * parameters on a plain pg client (BEGIN, the fence row FOR SHARE, the idempotency-key lookup, the stream bump, the
 * five rows in one statement, COMMIT). In this process, on a fresh database, one admission after another, taking turns
 * round by round; prints CPU (this process, all threads) and wall time per admission, medians of the rounds, and the
 * ratio. The in-process runner has no outbox relay (nothing reads the rows both write): what a create costs beyond
 * this write (HTTP, the entity's Start, the event's propagation) is not in these figures.
 *
 *   BENCH_ADMISSIONS (1000 per round)  BENCH_ROUNDS (3)  DATABASE_URL (admin URL)
 */
import { NodeRuntime } from "@effect/platform-node"
import { Effect, Exit, Layer, Logger, LogLevel, Scope } from "effect"
import pg from "pg"
import { Projects } from "../src/persistence/Projects.js"
import { TaskAdmission } from "../src/persistence/TaskAdmission.js"
import { FENCE_SCOPE } from "../src/persistence/WriteFence.js"
import type { ProjectId, ProviderName, TenantId, UserId } from "../src/schema/ids.js"
import { inProcessRunner } from "./inProcessRunner.js"
import { median, ownCpuMsSince } from "./support.js"

const ADMISSIONS = Number(process.env.BENCH_ADMISSIONS ?? 1000)
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3)
const adminUrl = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres"
const uuid = () => crypto.randomUUID()
const request = { provider: "runway", model: "gen4.5", prompt: "p", duration_seconds: 5, resolution: "720p" }

/** The ceiling: one admission's statements on a plain pg client (the payloads as small as the product's). */
const admitPlain = async (c: pg.Client, tenantId: string, projectId: string) => {
  await c.query("BEGIN")
  const fence = await c.query(
    "SELECT mode, active_region, write_epoch, degraded_providers, updated_at FROM region_write_fence " +
      "WHERE resource_scope = $1 FOR SHARE",
    [FENCE_SCOPE]
  )
  const { active_region: region, write_epoch: epoch } = fence.rows[0]
  await c.query(
    "SELECT t.*, p.stream_epoch FROM generation_tasks t JOIN projects p ON p.project_id = t.project_id " +
      "WHERE t.tenant_id = $1 AND t.idempotency_key = $2",
    [tenantId, uuid()]
  )
  const stream = await c.query(
    "UPDATE projects SET last_seq = last_seq + 1 WHERE project_id = $1 AND tenant_id = $2 RETURNING stream_epoch, last_seq",
    [projectId, tenantId]
  )
  const { last_seq: seq, stream_epoch: streamEpoch } = stream.rows[0]
  const [taskId, attemptId, eventId, now] = [uuid(), uuid(), uuid(), new Date()]
  const payload = JSON.stringify({ task_id: taskId, task_version: 1, status: "queued", stage: "queued" })
  await c.query(
    `WITH task AS (
       INSERT INTO generation_tasks (id, tenant_id, project_id, user_id, idempotency_key, request_hash, request, status,
         stage, progress, version, last_seq, current_attempt_id, home_region, write_epoch, created_at, updated_at)
       VALUES ($1, $2, $3, $4, $5, 'h', $6::jsonb, 'queued', 'queued', NULL, 1, $7, $8, $9, $10, $11, $11)
       ON CONFLICT (tenant_id, idempotency_key) DO NOTHING RETURNING id
     ), attempt AS (
       INSERT INTO task_attempts (id, task_id, attempt_no, provider, model, client_request_id, submit_state)
       SELECT $8, id, 1, 'runway', 'gen4.5', $12, 'PREPARED' FROM task
     ), credit AS (
       INSERT INTO credit_ledger (tenant_id, task_id, attempt_id, ledger_type, amount)
       SELECT $2, id, NULL, 'reserve', 5 FROM task
     ), event AS (
       INSERT INTO task_events (event_id, tenant_id, project_id, task_id, attempt_id, task_version, stream_epoch,
         cursor_seq, event_type, public_payload, source, trace_id)
       SELECT $13, $2, $3, id, $8, 1, $14, $7, 'task.created', $15::jsonb, 'api', 't' FROM task
     ), outbox AS (
       INSERT INTO outbox_events (event_id, aggregate_type, aggregate_id, aggregate_version, event_type, payload,
         home_region, write_epoch)
       SELECT $13, 'generation_task', id, 1, 'task.created', $15::jsonb, $9, $10 FROM task
     )
     SELECT count(*)::int AS inserted FROM task`,
    [
      taskId,
      tenantId,
      projectId,
      uuid(),
      uuid(),
      JSON.stringify(request),
      seq,
      attemptId,
      region,
      epoch,
      now,
      uuid(),
      eventId,
      streamEpoch,
      payload
    ]
  )
  await c.query("COMMIT")
}

/** `n` runs of `run`, one after another: CPU and wall ms per run. */
const perRun = (n: number, run: () => Effect.Effect<unknown, unknown>) =>
  Effect.gen(function*() {
    const cpu = process.cpuUsage()
    const started = performance.now()
    for (let i = 0; i < n; i++) yield* run()
    return { cpu: ownCpuMsSince(cpu) / n, wall: (performance.now() - started) / n }
  })

const program = Effect.gen(function*() {
  const admin = new pg.Client({ connectionString: adminUrl })
  yield* Effect.promise(() => admin.connect())
  const name = `bench_admission_${Date.now().toString(36)}`
  yield* Effect.promise(() => admin.query(`CREATE DATABASE ${name}`))
  const url = new URL(adminUrl)
  url.pathname = `/${name}`
  const scope = yield* Scope.make()
  const plain = new pg.Client({ connectionString: url.toString() })
  const cleanup = Effect.gen(function*() {
    yield* Scope.close(scope, Exit.void)
    yield* Effect.promise(() => plain.end().catch(() => undefined))
    yield* Effect.promise(() => admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`))
    yield* Effect.promise(() => admin.end())
  })
  yield* Effect.gen(function*() {
    const context = yield* Layer.buildWithScope(
      yield* inProcessRunner(url.toString(), 20, { propagation: false }),
      scope
    )
    yield* Effect.promise(() => plain.connect())
    const rounds = yield* Effect.gen(function*() {
      const admission = yield* TaskAdmission
      const tenantId = uuid() as TenantId
      const projectId = uuid() as ProjectId
      yield* (yield* Projects).ensure(tenantId, projectId)
      const admit = () =>
        admission.admit({
          tenantId,
          projectId,
          userId: uuid() as UserId,
          idempotencyKey: uuid(),
          requestHash: "h",
          request,
          provider: "runway" as ProviderName,
          model: "gen4.5",
          reserveAmount: 5,
          traceId: "t"
        })
      const ceiling = () => Effect.promise(() => admitPlain(plain, tenantId, projectId))
      // a round of each first, not counted: both paths' code compiled
      yield* perRun(ADMISSIONS, admit)
      yield* perRun(ADMISSIONS, ceiling)
      const out: Array<{ ours: { cpu: number; wall: number }; plain: { cpu: number; wall: number } }> = []
      for (let round = 0; round < ROUNDS; round++) {
        const ours = yield* perRun(ADMISSIONS, admit)
        const plainRun = yield* perRun(ADMISSIONS, ceiling)
        console.log(
          `round ${round + 1}: TaskAdmission.admit ${ours.cpu.toFixed(2)} ms of CPU, ${
            ours.wall.toFixed(2)
          } ms each; ` +
            `plain pg ${plainRun.cpu.toFixed(2)} ms of CPU, ${plainRun.wall.toFixed(2)} ms each`
        )
        out.push({ ours, plain: plainRun })
      }
      return out
    }).pipe(Effect.provide(context))
    const m = (f: (r: (typeof rounds)[number]) => number) => median(rounds.map(f))
    const [oursCpu, plainCpu, oursWall, plainWall] = [
      m((r) => r.ours.cpu),
      m((r) => r.plain.cpu),
      m((r) => r.ours.wall),
      m((r) => r.plain.wall)
    ]
    console.log(
      `admission (medians of ${ROUNDS} rounds of ${ADMISSIONS}): ${oursCpu.toFixed(2)} ms of CPU and ${
        oursWall.toFixed(2)
      } ms each; the same statements on a plain pg client ${plainCpu.toFixed(2)} ms and ${
        plainWall.toFixed(2)
      } ms: CPU ${(oursCpu / plainCpu).toFixed(1)}× the ceiling, wall ${(oursWall / plainWall).toFixed(1)}×`
    )
  }).pipe(Effect.ensuring(cleanup))
})

program.pipe(Effect.provide(Logger.minimumLogLevel(LogLevel.Error)), NodeRuntime.runMain)
