import { HttpClient, HttpClientRequest, type HttpClientResponse } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { TaskClient } from "../../src/entities/TaskClient.js"
import { TokenSigner } from "../../src/http/Auth.js"
import { Projects } from "../../src/persistence/Projects.js"
import type { ProjectId, TaskId, TenantId, UserId } from "../../src/schema/ids.js"
import { layerHttpTest } from "../../src/testing/TestRunner.js"
import { layerTestDatabase, noDatabase } from "../support/database.js"
import { scaled } from "../support/env.js"
import { layerTestRunner, quietLogs } from "../support/runner.js"
import { observation, uuid } from "../support/tasks.js"

const tenant = uuid() as TenantId
const project = uuid() as ProjectId

/** The tenant's project exists before the tests (its clients would have created it: POST /v1/projects). */
const layerProject = Layer.effectDiscard(Effect.flatMap(Projects, (p) => p.ensure(tenant, project)))

const TestLayer = layerHttpTest.pipe(
  Layer.provideMerge(layerProject.pipe(Layer.provideMerge(layerTestRunner(layerTestDatabase())))),
  Layer.provide(quietLogs)
)

const tokenFor = (claims: { tenant?: string; projects?: ReadonlyArray<string> | "*" } = {}) =>
  Effect.flatMap(TokenSigner, (s) =>
    s.sign({
      tenant_id: (claims.tenant ?? tenant) as TenantId,
      sub: uuid() as UserId,
      projects: (claims.projects ?? [project]) as ReadonlyArray<ProjectId>
    }))

const body = { provider: "openai", model: "sora-2", prompt: "a cat surfing", duration_seconds: 8 }

const send = (
  method: "GET" | "POST",
  url: string,
  options: { token?: string | null; key?: string; json?: unknown; raw?: string } = {}
) =>
  Effect.gen(function*() {
    const client = yield* HttpClient.HttpClient
    const token = options.token === undefined ? yield* tokenFor() : options.token
    let req = method === "GET" ? HttpClientRequest.get(url) : HttpClientRequest.post(url)
    if (token !== null) req = HttpClientRequest.bearerToken(req, token)
    if (options.key !== undefined) req = HttpClientRequest.setHeader(req, "idempotency-key", options.key)
    if (options.json !== undefined) req = yield* HttpClientRequest.bodyJson(req, options.json)
    if (options.raw !== undefined) req = HttpClientRequest.bodyText(req, options.raw, "application/json")
    const res: HttpClientResponse.HttpClientResponse = yield* client.execute(req)
    const text = yield* res.text
    return { status: res.status, body: text.length > 0 ? JSON.parse(text) : null }
  }).pipe(Effect.orDie)

const counts = (tenantId: string = tenant) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const [row] = yield* sql<{ tasks: number; reserves: number; events: number; outbox: number }>`
      SELECT (SELECT count(*) FROM generation_tasks WHERE tenant_id = ${tenantId})::int AS tasks,
             (SELECT count(*) FROM credit_ledger
              WHERE tenant_id = ${tenantId} AND ledger_type = 'reserve')::int AS reserves,
             (SELECT count(*) FROM task_events WHERE tenant_id = ${tenantId})::int AS events,
             (SELECT count(*) FROM outbox_events o JOIN generation_tasks t ON t.id = o.aggregate_id
              WHERE t.tenant_id = ${tenantId})::int AS outbox`
    return row!
  })

const tasksUrl = `/v1/projects/${project}/tasks`

describe.skipIf(noDatabase)("task API over HTTP with a cluster runner on PostgreSQL", () => {
  layer(TestLayer, { timeout: scaled(60_000), excludeTestServices: true })((it) => {
    it.effect("POST of a request the provider would refuse is 422 with the reason, and reserves nothing", () =>
      Effect.gen(function*() {
        const before = yield* counts()
        const imageModel = { provider: "runway", model: "gen4_turbo", prompt: "a boat", duration_seconds: 5 }
        const refused = yield* send("POST", tasksUrl, { key: uuid(), json: imageModel })
        expect(refused.status).toBe(422)
        expect(refused.body).toMatchObject({ _tag: "UnsupportedRequest" })
        expect(String(refused.body.message)).toContain("gen4_turbo")
        const tooLong = { provider: "openai", model: "sora-2", prompt: "a boat", duration_seconds: 13 }
        expect((yield* send("POST", tasksUrl, { key: uuid(), json: tooLong })).status).toBe(422)
        expect(yield* counts()).toEqual(before)
        const ok = { provider: "runway", model: "gen4.5", prompt: "a boat", duration_seconds: 5 }
        expect((yield* send("POST", tasksUrl, { key: uuid(), json: ok })).status).toBe(201)
      }))

    it.effect("POST creates the task, reserve, created event and outbox row in one go", () =>
      Effect.gen(function*() {
        const before = yield* counts()
        const res = yield* send("POST", tasksUrl, { key: uuid(), json: body })
        expect(res.status).toBe(201)
        expect(res.body).toMatchObject({ status: "queued", stage: "queued", task_version: 1, project_id: project })
        expect(res.body.cursor).toMatch(/^\d+-\d+$/)
        const after = yield* counts()
        expect(after).toEqual({
          tasks: before.tasks + 1,
          reserves: before.reserves + 1,
          events: before.events + 1,
          outbox: before.outbox + 1
        })
      }))

    it.effect("the same Idempotency-Key returns the same task without a second reserve; another body is 422", () =>
      Effect.gen(function*() {
        const key = uuid()
        const first = yield* send("POST", tasksUrl, { key, json: body })
        const before = yield* counts()
        const again = yield* send("POST", tasksUrl, { key, json: body })
        expect(again.status).toBe(201)
        expect(again.body.task_id).toBe(first.body.task_id)
        const other = yield* send("POST", tasksUrl, { key, json: { ...body, prompt: "a dog" } })
        expect(other.status).toBe(422)
        expect(yield* counts()).toEqual(before)
      }))

    it.effect("concurrent creates with one key make exactly one task and one reserve", () =>
      Effect.gen(function*() {
        const key = uuid()
        const before = yield* counts()
        const results = yield* Effect.forEach(Array.from({ length: 8 }), () =>
          send("POST", tasksUrl, { key, json: body }), { concurrency: "unbounded" })
        expect(
          new Set(results.map((r) =>
            r.status
          ))
        ).toEqual(new Set([201]))
        expect(new Set(results.map((r) => r.body.task_id)).size).toBe(1)
        const after = yield* counts()
        expect(after.tasks - before.tasks).toBe(1)
        expect(after.reserves - before.reserves).toBe(1)
      }))

    it.effect("malformed input is 400 with a clear message and writes nothing", () =>
      Effect.gen(function*() {
        const before = yield* counts()
        const bad = yield* send("POST", tasksUrl, { key: uuid(), json: { ...body, duration_seconds: "long" } })
        expect(bad.status).toBe(400)
        expect(JSON.stringify(bad.body)).toContain("duration_seconds")
        expect((yield* send("POST", tasksUrl, { key: uuid(), raw: "{not json" })).status).toBe(400)
        expect((yield* send("POST", tasksUrl, { json: body })).status).toBe(400) // no Idempotency-Key
        expect((yield* send("POST", "/v1/projects/not-a-uuid/tasks", { key: uuid(), json: body })).status).toBe(400)
        expect(yield* counts()).toEqual(before)
      }))

    it.effect("tokens are scoped: no token 401, another tenant or project 404, nothing leaks", () =>
      Effect.gen(function*() {
        const created = yield* send("POST", tasksUrl, { key: uuid(), json: body })
        const taskUrl = `${tasksUrl}/${created.body.task_id}`
        expect((yield* send("GET", taskUrl, { token: null })).status).toBe(401)
        expect((yield* send("GET", taskUrl, { token: "not.a.jwt" })).status).toBe(401)
        const otherTenant = yield* tokenFor({ tenant: uuid(), projects: "*" })
        const hidden = yield* send("GET", taskUrl, { token: otherTenant })
        expect(hidden.status).toBe(404)
        expect(JSON.stringify(hidden.body)).not.toContain("queued")
        expect((yield* send("POST", `${taskUrl}/cancel`, { token: otherTenant })).status).toBe(404)
        const otherProject = yield* tokenFor({ projects: [uuid()] })
        expect((yield* send("GET", taskUrl, { token: otherProject })).status).toBe(404)
        // another tenant cannot create tasks in a project that belongs to this tenant
        const takeover = yield* send("POST", tasksUrl, { token: otherTenant, key: uuid(), json: body })
        expect(takeover.status).toBe(404)
      }))

    it.effect("GET returns the snapshot with task_version and the cursor to follow from", () =>
      Effect.gen(function*() {
        const created = yield* send("POST", tasksUrl, { key: uuid(), json: body })
        const taskId = created.body.task_id as TaskId
        const sql = yield* SqlClient.SqlClient
        const [{ current_attempt_id }] = yield* sql<{ current_attempt_id: string }>`
          SELECT current_attempt_id FROM generation_tasks WHERE id = ${taskId}`
        const tasks = yield* TaskClient
        yield* tasks.send(
          taskId,
          (c) => c.Observe(observation(current_attempt_id as never, "running", { progress: 30 }))
        )
        const got = yield* send("GET", `${tasksUrl}/${taskId}`)
        expect(got.status).toBe(200)
        expect(got.body).toMatchObject({ task_id: taskId, task_version: 2, status: "running", progress: 30 })
        const [{ cursor_seq }] = yield* sql<{ cursor_seq: number }>`
          SELECT cursor_seq FROM task_events WHERE task_id = ${taskId} AND task_version = 2`
        expect(got.body.cursor).toBe(`${got.body.cursor.split("-")[0]}-${cursor_seq}`)
      }))

    it.effect("cancel: a task not yet sent is canceled at once; a generated one is refused with 409", () =>
      Effect.gen(function*() {
        const created = yield* send("POST", tasksUrl, { key: uuid(), json: body })
        const c1 = yield* send("POST", `${tasksUrl}/${created.body.task_id}/cancel`)
        expect(c1.status).toBe(202)
        expect(c1.body).toMatchObject({ status: "canceled", task_version: 2 })
        expect((yield* send("POST", `${tasksUrl}/${created.body.task_id}/cancel`)).body.task_version).toBe(2)

        const done = yield* send("POST", tasksUrl, { key: uuid(), json: body })
        const sql = yield* SqlClient.SqlClient
        const [{ current_attempt_id }] = yield* sql<{ current_attempt_id: string }>`
          SELECT current_attempt_id FROM generation_tasks WHERE id = ${done.body.task_id}`
        const tasks = yield* TaskClient
        yield* tasks.send(done.body.task_id, (c) => c.Observe(observation(current_attempt_id as never, "succeeded")))
        expect((yield* send("POST", `${tasksUrl}/${done.body.task_id}/cancel`)).status).toBe(409)
      }))

    it.effect("ids are case-insensitive: an upper-case retry replays, an upper-case path finds the task", () =>
      Effect.gen(function*() {
        const key = uuid()
        const first = yield* send("POST", tasksUrl, { key, json: body })
        const upper = `/v1/projects/${project.toUpperCase()}/tasks`
        const again = yield* send("POST", upper, { key, json: body })
        expect(again).toMatchObject({ status: 201, body: { task_id: first.body.task_id } })
        const got = yield* send("GET", `${upper}/${String(first.body.task_id).toUpperCase()}`)
        expect(got).toMatchObject({ status: 200, body: { task_id: first.body.task_id } })
      }))

    it.effect("OpenAPI is served at /docs and /openapi.json", () =>
      Effect.gen(function*() {
        const client = yield* HttpClient.HttpClient
        const docs = yield* client.get("/docs")
        expect(docs.status).toBe(200)
        const spec = (yield* (yield* client.get("/openapi.json")).json) as { paths: Record<string, unknown> }
        expect(Object.keys(spec.paths)).toContain("/v1/projects/{project}/tasks")
      }).pipe(Effect.orDie))
  })
})
