import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Layer, Schedule } from "effect"
import { TokenSigner } from "../../../src/http/Auth.js"
import type { TenantId, UserId } from "../../../src/schema/ids.js"
import { databaseUrl, makeTestDatabaseUrl, noDatabase } from "../../support/database.js"
import { scaled, scaledDuration } from "../../support/env.js"
import { spawnRunner, waitForHttp } from "../../support/processes.js"
import { freePort, withSettings } from "../../support/runner.js"
import { uuid } from "../../support/tasks.js"
import { startTcpProxy } from "../../support/tcpProxy.js"
import { openaiEvent, openAISigner } from "../../support/webhooks.js"

const AUTH_SECRET = "database-outage-test-secret-0123456789"
const OPENAI_SECRET = "whsec_" + Buffer.from("openai-outage-secret-32-bytes-ok!").toString("base64")
const TENANT = uuid() as TenantId

/** How long the runner may wait on a silent PostgreSQL (connect, and a query's answer) before it gives up. */
const DB_TIMEOUT = Duration.seconds(2)
/** What a request may take on top of that: the HTTP round trip, logging, a loaded machine. */
const MARGIN = Duration.seconds(3)
/** The runner's pool: the outage's traffic is twice that, so hung connections alone would exhaust it. */
const POOL_SIZE = 8

type Answer = { readonly status: number } | "no answer"

/**
 * A runner process whose PostgreSQL link goes silent: connections stay open and nothing comes back, the way a
 * firewall or a NAT that forgot them behaves (the outage the issue measured: 35–45 s and more without an answer, and
 * no recovery 64 s after the link came back). Every request that needs the database answers 503 within the bound;
 * once the link is back, the runner serves again within seconds.
 */
describe.skipIf(noDatabase)("a silent database link", () => {
  it.live(
    "the API answers 503 within the bound while PostgreSQL is silent, and recovers once it is back",
    () =>
      Effect.gen(function*() {
        const { url } = yield* makeTestDatabaseUrl
        const proxy = yield* Effect.acquireRelease(
          Effect.promise(() => startTcpProxy(Number(new URL(databaseUrl!).port || 5432))),
          (p) => Effect.promise(p.close)
        )
        const proxied = new URL(url)
        proxied.hostname = "127.0.0.1"
        proxied.port = String(proxy.port)
        const [httpPort, runnerPort, simPort] = yield* Effect.all([freePort, freePort, freePort])
        const runner = yield* Effect.acquireRelease(
          Effect.sync(() =>
            spawnRunner({
              DATABASE_URL: proxied.toString(),
              DB_POOL_SIZE: String(POOL_SIZE),
              DB_CONNECT_TIMEOUT: `${Duration.toMillis(DB_TIMEOUT)} millis`,
              // a query with no answer is given up 1 s after the statement timeout
              DB_STATEMENT_TIMEOUT: `${Duration.toMillis(DB_TIMEOUT) - 1000} millis`,
              ROCKETMQ_ENDPOINTS: "",
              AUTH_SECRET,
              OPENAI_WEBHOOK_SECRET: OPENAI_SECRET,
              EMBEDDED_SIMULATOR: "true",
              SIMULATOR_PORT: String(simPort),
              HTTP_PORT: String(httpPort),
              RUNNER_PORT: String(runnerPort),
              LOG_LEVEL: "Warn"
            })
          ),
          (proc) => Effect.sync(() => proc.child.kill("SIGKILL"))
        )
        yield* Effect.promise(() => waitForHttp(httpPort, runner))

        const token = yield* Effect.flatMap(
          TokenSigner,
          (s) => s.sign({ tenant_id: TENANT, sub: uuid() as UserId, projects: "*" })
        ).pipe(
          Effect.provide(TokenSigner.Default.pipe(Layer.provide(withSettings({ AUTH_SECRET }))))
        )
        const base = `http://127.0.0.1:${httpPort}`
        const auth = { authorization: `Bearer ${token}` }
        // projects are made by their owner (the server chooses the id)
        const made = yield* Effect.tryPromise(async () => {
          const res = await fetch(`${base}/v1/projects`, { method: "POST", headers: auth })
          return { status: res.status, body: (await res.json()) as { project_id: string } }
        })
        expect(made.status).toBe(201)
        const projectId = made.body.project_id
        const tasks = `${base}/v1/projects/${projectId}/tasks`
        /** The answer's status, or "no answer" when none came within `within` (scaled). */
        const request = (path: string, init: RequestInit = {}, within = Duration.sum(DB_TIMEOUT, MARGIN)) =>
          Effect.promise(async (): Promise<Answer> => {
            try {
              const res = await fetch(path, { ...init, signal: AbortSignal.timeout(scaled(Duration.toMillis(within))) })
              await res.body?.cancel()
              return { status: res.status }
            } catch {
              return "no answer"
            }
          })
        /** The answer with its JSON body; fails when none came (interrupted: aborted), or it is not JSON. */
        const call = <A>(path: string, init: RequestInit = {}) =>
          Effect.tryPromise(async (signal) => {
            const res = await fetch(path, { ...init, signal })
            return { status: res.status, body: (await res.json()) as A }
          })
        const creation = () => ({
          method: "POST",
          headers: { ...auth, "content-type": "application/json", "idempotency-key": uuid() },
          body: JSON.stringify({ provider: "runway", model: "gen4.5", prompt: "a cat surfing", duration_seconds: 8 })
        })
        const webhook = Effect.suspend(() => {
          const body = openaiEvent(`video_${uuid()}`)
          return request(`${base}/webhooks/openai`, {
            method: "POST",
            headers: { ...openAISigner(OPENAI_SECRET)(body), "content-type": "application/json" },
            body
          })
        })

        // made while the link is up: the pool holds open connections when it goes silent
        const first = yield* call<{ task_id: string }>(tasks, creation())
        expect(first.status).toBe(201)
        const task = `${tasks}/${first.body.task_id}`
        const minted = yield* call<{ token: string }>(`${base}/v1/projects/${projectId}/stream-tokens`, {
          method: "POST",
          headers: auth
        })
        expect(minted.status).toBe(201)
        const streamToken = minted.body.token

        proxy.blackhole()
        // steady traffic meanwhile: more requests than the pool has connections
        const traffic = Effect.forEach(
          Array.from({ length: 2 * POOL_SIZE }),
          () => request(tasks, { headers: auth }),
          { concurrency: "unbounded" }
        )
        const [answers, trafficAnswers] = yield* Effect.all([
          Effect.all({
            create: request(tasks, creation()),
            get: request(task, { headers: auth }),
            list: request(tasks, { headers: auth }),
            cancel: request(`${task}/cancel`, { method: "POST", headers: auth }),
            webhook,
            mintStreamToken: request(`${base}/v1/projects/${projectId}/stream-tokens`, {
              method: "POST",
              headers: auth
            }),
            sse: request(`${base}/v1/projects/${projectId}/events`, { headers: auth }),
            sseWithStreamToken: request(`${base}/v1/projects/${projectId}/events?stream_token=${streamToken}`)
          }, { concurrency: "unbounded" }),
          traffic
        ], { concurrency: 2 })
        expect(answers, runner.output()).toEqual({
          create: { status: 503 },
          get: { status: 503 },
          list: { status: 503 },
          cancel: { status: 503 },
          webhook: { status: 503 },
          mintStreamToken: { status: 503 },
          sse: { status: 503 },
          sseWithStreamToken: { status: 503 }
        })
        expect(new Set(trafficAnswers.map((a) => a === "no answer" ? a : a.status))).toEqual(new Set([503]))

        proxy.resume()
        // back within seconds: the dead connections were dropped, fresh ones reach PostgreSQL
        const created = yield* call<{ task_id: string }>(tasks, creation()).pipe(
          Effect.filterOrFail((r) => r.status === 201),
          Effect.timeout(scaledDuration(Duration.sum(DB_TIMEOUT, MARGIN))),
          Effect.retry(Schedule.spaced("200 millis").pipe(Schedule.upTo(scaledDuration("15 seconds")))),
          Effect.orElse(() => Effect.dieMessage(`the runner did not recover:\n${runner.output()}`))
        )
        expect(yield* webhook).toEqual({ status: 204 })
        expect(yield* request(`${base}/v1/projects/${projectId}/events`, { headers: auth })).toEqual({ status: 200 })
        // and the cluster with it: the new task's entity (on a shard this runner locks again) starts it
        yield* call<{ status: string }>(`${tasks}/${created.body.task_id}`, { headers: auth }).pipe(
          Effect.filterOrFail((r) => r.body.status !== "queued"),
          Effect.retry(Schedule.spaced("200 millis").pipe(Schedule.upTo(scaledDuration("20 seconds")))),
          Effect.orElse(() => Effect.dieMessage(`the new task was never started:\n${runner.output()}`))
        )
      }).pipe(Effect.scoped),
    scaled(120_000)
  )
})
