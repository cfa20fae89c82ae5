import { SqlClient } from "@effect/sql"
import { Context, Effect, Layer, Option } from "effect"
import { Redis as IORedis } from "ioredis"
import * as Bus from "../../src/bus/NotificationBus.js"
import { makeChange } from "../../src/domain/transition.js"
import { TokenSigner } from "../../src/http/Auth.js"
import { TaskStore } from "../../src/persistence/TaskStore.js"
import { layerPropagationWith } from "../../src/propagation/Propagation.js"
import { layerMemory as queueMemory } from "../../src/queue/MemoryQueue.js"
import * as Redis from "../../src/redis/Redis.js"
import type { ProjectId, TaskId, TenantId, UserId } from "../../src/schema/ids.js"
import type { Stage, TaskStatus } from "../../src/schema/task.js"
import { layerTestDatabase } from "./database.js"
import { services } from "./env.js"
import { layerTestRunner, quietLogs, withSettings } from "./runner.js"
import { layerRunnerHttp } from "./simulator.js"
import { admitTask } from "./tasks.js"
import { startTcpProxy } from "./tcpProxy.js"

/** Like DATABASE_URL: without REDIS_URL the gateway tests are skipped locally, and must not be in CI (env.ts). */
export const redisUrl = services.redisUrl

/** A TCP proxy in front of Redis, so a test can cut the bus off (a Redis outage) without stopping Redis. */
export class RedisProxy extends Context.Tag("RedisProxy")<RedisProxy, Awaited<ReturnType<typeof startTcpProxy>>>() {}

const layerRedisProxy = Layer.scoped(
  RedisProxy,
  Effect.acquireRelease(
    Effect.promise(() => {
      const target = new URL(redisUrl!)
      return startTcpProxy(Number(target.port || 6379), target.hostname)
    }),
    (proxy) => Effect.promise(() => proxy.close())
  )
)

/**
 * A runner with its HTTP server on `httpPort`, propagation on the in-process queue and the real Redis bus (through
 * the proxy, under a key prefix of its own), on a fresh database.
 */
export const layerStreamRunner = (httpPort: number, settings: Readonly<Record<string, string>> = {}) => {
  const prefix = `test-${crypto.randomUUID().slice(0, 8)}:`
  const bus = Bus.layerRedis.pipe(
    Layer.provide(
      Layer.unwrapEffect(Effect.map(RedisProxy, (p) => Redis.layer(`redis://127.0.0.1:${p.port}`, prefix)))
    ),
    // the same layer value as below: built once, so the test's RedisProxy is the bus's
    Layer.provide(layerRedisProxy)
  )
  return layerRunnerHttp(httpPort).pipe(
    Layer.provideMerge(layerTestRunner(layerTestDatabase(16), { propagation: layerPropagationWith(queueMemory, bus) })),
    Layer.provideMerge(layerRedisProxy),
    Layer.provide(quietLogs),
    Layer.provide(withSettings(settings))
  )
}

export const TENANT = "00000000-0000-4000-8000-0000000000a1" as TenantId
export const OTHER_TENANT = "00000000-0000-4000-8000-0000000000b2" as TenantId

/** A bearer token for `tenant`, scoped to `projects` ("*" by default). */
export const tokenFor = (
  options: { readonly tenant?: TenantId; readonly projects?: ReadonlyArray<ProjectId> | "*"; readonly user?: string } =
    {}
) =>
  Effect.flatMap(TokenSigner, (signer) =>
    signer.sign({
      tenant_id: options.tenant ?? TENANT,
      sub: (options.user ?? crypto.randomUUID()) as UserId,
      projects: options.projects ?? "*"
    }))

/**
 * Commits one change of a task straight through the store (the entity's own commit path): a new version, a new
 * event and outbox row, with whatever status and stage (no transition rules: a test of delivery, not of states).
 */
export const commitChange = (
  taskId: TaskId,
  target: { readonly status: TaskStatus; readonly stage: Stage; readonly progress: number | null }
) =>
  Effect.gen(function*() {
    const store = yield* TaskStore
    for (;;) {
      const state = Option.getOrThrow(yield* store.load(taskId))
      const change = makeChange(state.task, state.attempt, { ...target, errorCode: null }, new Date(), {
        source: "poll",
        traceId: "trace"
      })
      const res = yield* store.commit(state.task, change)
      if (res._tag === "Committed") return res.task
    }
  }).pipe(Effect.orDie)

/** Every event of a project in PostgreSQL after `afterSeq`: what a client must have received. */
export const storedEvents = (projectId: string, afterSeq: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ cursor_seq: number; task_id: string; task_version: number }>`
      SELECT cursor_seq, task_id, task_version FROM task_events
      WHERE project_id = ${projectId} AND cursor_seq > ${afterSeq} ORDER BY cursor_seq`).pipe(Effect.orDie)

/**
 * An event of the project that the bus never carries (as if its message were lost while Redis stayed up): a copy of
 * the project's last event at the next cursor, written with no outbox row, so nothing publishes it. Its sequence.
 */
export const eventOffTheBus = (projectId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ cursor_seq: number }>`
      WITH head AS (
        UPDATE projects SET last_seq = last_seq + 1 WHERE project_id = ${projectId} RETURNING stream_epoch, last_seq
      )
      INSERT INTO task_events (event_id, tenant_id, project_id, task_id, attempt_id, task_version, stream_epoch,
        cursor_seq, event_type, public_payload, source, trace_id)
      SELECT gen_random_uuid(), e.tenant_id, e.project_id, e.task_id, e.attempt_id, e.task_version + 1000,
        head.stream_epoch, head.last_seq, e.event_type, e.public_payload, e.source, 'off-the-bus'
      FROM head, LATERAL (
        SELECT * FROM task_events WHERE project_id = ${projectId} ORDER BY cursor_seq DESC LIMIT 1
      ) e
      RETURNING cursor_seq`).pipe(Effect.map((rows) => Number(rows[0]!.cursor_seq)), Effect.orDie)

/** A project with `n` tasks of TENANT; returns their ids. */
export const projectWithTasks = (n: number) =>
  Effect.gen(function*() {
    const projectId = crypto.randomUUID() as ProjectId
    const tasks: Array<TaskId> = []
    for (let i = 0; i < n; i++) tasks.push((yield* admitTask({ projectId, tenantId: TENANT })).taskId)
    return { projectId, tasks }
  })

/** Where a project's stream stands in PostgreSQL. */
export const headOf = (projectId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ stream_epoch: number; last_seq: number }>`
      SELECT stream_epoch, last_seq FROM projects WHERE project_id = ${projectId}`).pipe(
      Effect.map((rows) => ({ epoch: Number(rows[0]!.stream_epoch), seq: Number(rows[0]!.last_seq) })),
      Effect.orDie
    )

export const bearer = (token: string) => ({ authorization: `Bearer ${token}` })

/**
 * The gateway settings of the SSE and WebSocket tests: short heartbeats and tail intervals, and room in each
 * connection's buffer for every event a replaying client is sent meanwhile (≤ 190 here). A full buffer coalesces
 * progress by design (ConnectionBuffer), and these tests assert the exact stored sequence; coalescing has its own tests.
 */
export const streamSettings = {
  SSE_HEARTBEAT: "300 millis",
  SSE_WRITE_DEADLINE: "2 seconds",
  GATEWAY_CONNECTION_BUFFER: "512",
  GATEWAY_TAIL_INTERVAL: "300 millis",
  OUTBOX_SWEEP_INTERVAL: "500 millis"
}

/** History a client has not seen yet: `n` commits across the tasks, made before it connects. */
export const commitHistory = (tasks: ReadonlyArray<TaskId>, n = 40) =>
  Effect.forEach(
    Array.from({ length: n }, (_, i) => i),
    (i) => commitChange(tasks[i % tasks.length]!, { status: "running", stage: "generating", progress: 10 + i }),
    { discard: true }
  )

/** Writers that keep committing (25 changes per task, last progress 84) while a client replays and goes live. */
export const concurrentWriters = (tasks: ReadonlyArray<TaskId>) =>
  Effect.forEach(
    tasks,
    (task) =>
      Effect.forEach(
        Array.from({ length: 25 }, (_, i) => i),
        (i) => commitChange(task, { status: "running", stage: "generating", progress: 60 + i }),
        { discard: true }
      ),
    { concurrency: "unbounded", discard: true }
  )

/** Redis channels of a project that someone subscribes to (any key prefix): a gateway feed following it live. */
export const busChannels = (projectId: string) =>
  Effect.acquireUseRelease(
    Effect.sync(() => new IORedis(redisUrl!)),
    (redis) => Effect.promise(() => redis.pubsub("CHANNELS", `*project:${projectId}`) as Promise<Array<string>>),
    (redis) => Effect.promise(() => redis.quit())
  )
