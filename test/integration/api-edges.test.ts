import { HttpServer } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as http from "node:http"
import WebSocket from "ws"
import { TokenSigner } from "../../src/http/Auth.js"
import type { ProjectId, TenantId, UserId } from "../../src/schema/ids.js"
import { layerHttpTest } from "../../src/testing/TestRunner.js"
import { layerTestDatabase, noDatabase } from "../support/database.js"
import { scaled } from "../support/env.js"
import { layerTestRunner, quietLogs, withSettings } from "../support/runner.js"
import { uuid } from "../support/tasks.js"

/**
 * Issue #12, findings 5, 6, 7 and 9: the JSON API's edges, over HTTP against a runner on PostgreSQL. Body limits
 * (413 while reading, short error details, every problem reported), text PostgreSQL cannot store (400, not 503),
 * projects (created by their owner only, never by a read, capped per tenant) and providers (only configured ones).
 */
const settings = { PROVIDERS_ENABLED: "openai,runway,luma", PROJECTS_PER_TENANT: "3" }

const TestLayer = layerHttpTest.pipe(
  Layer.provideMerge(layerTestRunner(layerTestDatabase(), { settings })),
  Layer.provide(quietLogs),
  Layer.provide(withSettings(settings))
)

const tokenFor = (tenant: string, projects: ReadonlyArray<string> | "*" = "*") =>
  Effect.flatMap(TokenSigner, (s) =>
    s.sign({
      tenant_id: tenant as TenantId,
      sub: uuid() as UserId,
      projects: projects as ReadonlyArray<ProjectId>
    }))

interface Answer {
  readonly status: number
  readonly text: string
  readonly body: any
}

/** One request on a fresh connection of the runner's server; `body` is sent as is (a string: with Content-Length). */
const request = (
  method: string,
  path: string,
  options: { token?: string; key?: string; body?: string; headers?: Record<string, string> } = {}
) =>
  Effect.gen(function*() {
    const server = yield* HttpServer.HttpServer
    const port = (server.address as HttpServer.TcpAddress).port
    const headers: Record<string, string> = { ...options.headers }
    if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`
    if (options.key !== undefined) headers["idempotency-key"] = options.key
    if (options.body !== undefined) headers["content-type"] = "application/json"
    const res = yield* Effect.promise(() =>
      fetch(`http://127.0.0.1:${port}${path}`, {
        method,
        headers,
        ...(options.body === undefined ? {} : { body: options.body })
      })
    )
    const text = yield* Effect.promise(() => res.text())
    let body: any = null
    try {
      body = text.length > 0 ? JSON.parse(text) : null
    } catch {
      body = text
    }
    return { status: res.status, text, body } satisfies Answer
  })

/** The HTTP status a WebSocket upgrade gets (101 when it opens). */
const upgradeStatus = (path: string, token: string) =>
  Effect.flatMap(HttpServer.HttpServer, (server) =>
    Effect.async<number>((resume) => {
      const port = (server.address as HttpServer.TcpAddress).port
      const socket = new WebSocket(`ws://127.0.0.1:${port}${path}`, { headers: { authorization: `Bearer ${token}` } })
      socket.on("open", () => {
        socket.terminate()
        resume(Effect.succeed(101))
      })
      socket.on("unexpected-response", (req, res) => {
        req.destroy()
        resume(Effect.succeed(res.statusCode ?? 0))
      })
      socket.on("error", () => resume(Effect.succeed(0)))
      return Effect.sync(() => socket.terminate())
    }))

const createProject = (token: string) => request("POST", "/v1/projects", { token })

/** POST a task body (as is) to a project, with a fresh Idempotency-Key. */
const postTask = (token: string, project: string, body: string) =>
  request("POST", `/v1/projects/${project}/tasks`, { token, key: uuid(), body })

const task = (overrides: Record<string, unknown> = {}) =>
  JSON.stringify({ provider: "openai", model: "sora-2", prompt: "a lighthouse", duration_seconds: 8, ...overrides })

const counts = (tenant: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ projects: number; tasks: number; reserves: number }>`
      SELECT (SELECT count(*) FROM projects WHERE tenant_id = ${tenant})::int AS projects,
             (SELECT count(*) FROM generation_tasks WHERE tenant_id = ${tenant})::int AS tasks,
             (SELECT count(*) FROM credit_ledger WHERE tenant_id = ${tenant} AND ledger_type = 'reserve')::int
               AS reserves`).pipe(Effect.map((rows) => rows[0]!), Effect.orDie)

/** A tenant with one project of its own (created through the API) and a token for every project of it. */
const tenantWithProject = Effect.gen(function*() {
  const tenant = uuid()
  const token = yield* tokenFor(tenant)
  const created = yield* createProject(token)
  expect(created.status).toBe(201)
  return { tenant, token, project: created.body.project_id as string }
})

describe.skipIf(noDatabase)("the JSON API's edges (issue #12: findings 5, 6, 7, 9)", () => {
  layer(TestLayer, { timeout: scaled(60_000), excludeTestServices: true })((it) => {
    // Finding 5
    it.effect("a body over API_MAX_BODY_BYTES (declared by Content-Length) is 413 with a short answer, writing nothing", () =>
      Effect.gen(function*() {
        const { project, tenant, token } = yield* tenantWithProject
        const before = yield* counts(tenant)
        const huge = yield* postTask(token, project, task({ prompt: "a".repeat(1024 * 1024) }))
        expect(huge.status).toBe(413)
        expect(huge.text.length).toBeLessThan(512)
        expect(huge.body).toMatchObject({ _tag: "PayloadTooLarge" })
        expect(yield* counts(tenant)).toEqual(before)
      }))

    it.effect("a chunked body is cut off at the limit while it streams in: 413 before the client has finished", () =>
      Effect.gen(function*() {
        const { project, token } = yield* tenantWithProject
        const server = yield* HttpServer.HttpServer
        const port = (server.address as HttpServer.TcpAddress).port
        // 128 KiB of a prompt and then nothing more: a server that buffers the whole body never answers
        const answer = yield* Effect.async<{ status: number; text: string }, string>((resume) => {
          const req = http.request({
            host: "127.0.0.1",
            port,
            method: "POST",
            path: `/v1/projects/${project}/tasks`,
            headers: {
              authorization: `Bearer ${token}`,
              "idempotency-key": uuid(),
              "content-type": "application/json",
              "transfer-encoding": "chunked"
            }
          })
          req.on("response", (res) => {
            let text = ""
            res.on("data", (c) => (text += c))
            res.on("end", () => resume(Effect.succeed({ status: res.statusCode ?? 0, text })))
            res.on("error", (e) => resume(Effect.fail(`response: ${e.message}`)))
          })
          req.on("error", (e) => resume(Effect.fail(`request: ${e.message}`)))
          req.write(`{"provider":"openai","model":"sora-2","duration_seconds":8,"prompt":"`)
          for (let i = 0; i < 8; i++) req.write("b".repeat(16 * 1024))
          return Effect.sync(() => req.destroy())
        }).pipe(Effect.timeoutFail({ duration: scaled(10_000), onTimeout: () => "no answer before the body ended" }))
        expect(answer.status).toBe(413)
        expect(JSON.parse(answer.text)).toMatchObject({ _tag: "PayloadTooLarge" })
      }))

    it.effect("a 400 quotes at most a short prefix of an invalid value", () =>
      Effect.gen(function*() {
        const { project, token } = yield* tenantWithProject
        // just under the body limit, far over the prompt's 4,000 characters
        const bad = yield* postTask(token, project, task({ prompt: "c".repeat(60_000) }))
        expect(bad.status).toBe(400)
        expect(bad.text).toContain("prompt")
        expect(bad.text.length).toBeLessThan(2048)
        expect(bad.text).not.toContain("c".repeat(200))
        // the same for what the platform decodes: a path segment (the router takes up to 100 characters), a header
        // (up to Node's 16 KiB of headers)
        const path = yield* request("GET", `/v1/projects/${"d".repeat(99)}/tasks`, { token })
        expect(path.status).toBe(400)
        expect(path.text).not.toContain("d".repeat(99))
        const key = yield* request("POST", `/v1/projects/${project}/tasks`, {
          token,
          key: "e".repeat(8000),
          body: task()
        })
        expect(key.status).toBe(400)
        expect(key.text).toContain("idempotency-key")
        expect(key.text.length).toBeLessThan(1024)
        const notJson = yield* postTask(token, project, "{not")
        expect(notJson.status).toBe(400)
        expect(notJson.body.message).toContain("not valid JSON")
      }))

    it.effect("every problem of a body is reported at once, unknown fields included", () =>
      Effect.gen(function*() {
        const { project, tenant, token } = yield* tenantWithProject
        const before = yield* counts(tenant)
        const bad = yield* postTask(
          token,
          project,
          JSON.stringify({ provider: "openai", model: "", prompt: 7, duration_seconds: "long", resolutoin: "4k" })
        )
        expect(bad.status).toBe(400)
        expect(bad.body._tag).toBe("HttpApiDecodeError")
        const paths = (bad.body.issues as Array<{ path: Array<string> }>).map((i) => i.path.join("."))
        expect(paths.sort()).toEqual(["duration_seconds", "model", "prompt", "resolutoin"])
        expect(yield* counts(tenant)).toEqual(before)
      }))

    // Finding 6
    it.effect("text PostgreSQL cannot store (NUL, lone surrogates) is 400 naming the field, never 503", () =>
      Effect.gen(function*() {
        const { project, tenant, token } = yield* tenantWithProject
        const before = yield* counts(tenant)
        // written as JSON escapes, as a client would send them
        const nul = yield* postTask(token, project, task().replace("a lighthouse", "a\\u0000b"))
        expect(nul.status).toBe(400)
        expect(nul.text).toContain("prompt")
        expect(nul.text).toContain("NUL")
        const lone = yield* postTask(token, project, task().replace("a lighthouse", "a\\ud800b"))
        expect(lone.status).toBe(400)
        expect(lone.text).toContain("surrogate")
        const model = yield* postTask(token, project, task().replace("sora-2", "sora\\udc00"))
        expect(model.status).toBe(400)
        expect(model.text).toContain("model")
        expect(yield* counts(tenant)).toEqual(before)
        // a well-formed pair (an emoji) is fine
        const emoji = yield* postTask(token, project, task().replace("a lighthouse", "\\ud83c\\udf0a"))
        expect(emoji.status).toBe(201)
      }))

    // Finding 7
    it.effect("reads of an unknown project are 404 and create nothing (list, stream token, SSE, WebSocket)", () =>
      Effect.gen(function*() {
        const tenant = uuid()
        const token = yield* tokenFor(tenant)
        for (let i = 0; i < 10; i++) {
          const unknown = uuid()
          expect((yield* request("GET", `/v1/projects/${unknown}/tasks`, { token })).status).toBe(404)
          expect((yield* request("POST", `/v1/projects/${unknown}/stream-tokens`, { token })).status).toBe(404)
          const events = yield* request("GET", `/v1/projects/${unknown}/events`, { token })
          expect(events.status).toBe(404)
          expect(yield* upgradeStatus(`/v1/projects/${unknown}/events/ws`, token)).toBe(404)
        }
        expect((yield* counts(tenant)).projects).toBe(0)
      }))

    it.effect("no tenant can take another's project id: tasks need a project its owner created", () =>
      Effect.gen(function*() {
        const squatter = uuid()
        const squatterToken = yield* tokenFor(squatter)
        // naming a project id that nobody created, for a read or a write, gives the namer nothing
        const chosen = uuid()
        expect((yield* request("GET", `/v1/projects/${chosen}/tasks`, { token: squatterToken })).status).toBe(404)
        const write = yield* postTask(squatterToken, chosen, task())
        expect(write.status).toBe(404)
        expect(yield* counts(squatter)).toEqual({ projects: 0, tasks: 0, reserves: 0 })

        // the owner creates its project (the id is the server's), and only the owner sees and uses it
        const { project, tenant, token } = yield* tenantWithProject
        expect(project).not.toBe(chosen)
        const own = yield* postTask(token, project, task())
        expect(own.status).toBe(201)
        expect((yield* request("GET", `/v1/projects/${project}/tasks`, { token: squatterToken })).status).toBe(404)
        const intrusion = yield* postTask(squatterToken, project, task())
        expect(intrusion.status).toBe(404)
        const listed = yield* request("GET", "/v1/projects", { token })
        expect(listed.body.projects.map((p: { project_id: string }) => p.project_id)).toEqual([project])
        expect((yield* request("GET", "/v1/projects", { token: squatterToken })).body.projects).toEqual([])
        expect((yield* counts(tenant)).tasks).toBe(1)
      }))

    it.effect("project creation is capped per tenant (PROJECTS_PER_TENANT), and needs a token for every project", () =>
      Effect.gen(function*() {
        const tenant = uuid()
        const token = yield* tokenFor(tenant)
        const made = yield* Effect.all(Array.from({ length: 6 }, () => createProject(token)), { concurrency: 6 })
        expect(made.map((r) => r.status).sort()).toEqual([201, 201, 201, 403, 403, 403])
        expect(made.find((r) => r.status === 403)!.body).toMatchObject({ _tag: "ProjectLimitReached" })
        expect((yield* counts(tenant)).projects).toBe(3)
        // another tenant has its own allowance
        expect((yield* createProject(yield* tokenFor(uuid()))).status).toBe(201)
        // a token narrowed to some projects cannot make more
        const narrowed = yield* tokenFor(uuid(), [uuid()])
        expect((yield* createProject(narrowed)).status).toBe(403)
      }))

    // Finding 9
    it.effect("a provider that is not configured is 400 listing the configured ones, and reserves nothing", () =>
      Effect.gen(function*() {
        const { project, tenant, token } = yield* tenantWithProject
        const before = yield* counts(tenant)
        const unknown = yield* postTask(token, project, task({ provider: "nosuchprovider" }))
        expect(unknown.status).toBe(400)
        expect(unknown.text).toContain("openai, runway, luma")
        // in the platform's list, but not enabled on this runner (PROVIDERS_ENABLED)
        const disabled = yield* postTask(token, project, task({ provider: "fal" }))
        expect(disabled.status).toBe(400)
        expect(disabled.text).toContain("openai, runway, luma")
        expect(yield* counts(tenant)).toEqual(before)
        const enabled = yield* postTask(
          token,
          project,
          task({ provider: "runway", model: "gen4.5", duration_seconds: 5 })
        )
        expect(enabled.status).toBe(201)
      }))
  })
})
