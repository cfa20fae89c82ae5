import { FetchHttpClient } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { afterAll, beforeAll, describe, expect, layer } from "@effect/vitest"
import { Context, Duration, Effect, Layer, Redacted, Schedule } from "effect"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { TokenSigner } from "../../../src/http/Auth.js"
import { layerPostgres } from "../../../src/persistence/Database.js"
import { devSecret } from "../../../src/providers/devSecrets.js"
import { definitionOf } from "../../../src/providers/providers.js"
import { layerStores } from "../../../src/runners/Runner.js"
import type { TenantId, UserId } from "../../../src/schema/ids.js"
import { simulatorEnv } from "../../../src/simulator/embedded.js"
import { makeTestDatabaseUrl, noDatabase } from "../../support/database.js"
import { isCI, scaled, scaledDuration, services } from "../../support/env.js"
import {
  type Proc,
  rocketmqScript,
  spawnMarked,
  spawnRunner,
  waitForHttp,
  withTimeout
} from "../../support/processes.js"
import { until } from "../../support/propagation.js"
import { freePort, quietLogs, withSettings } from "../../support/runner.js"
import { layerSim, Sim } from "../../support/simulator.js"
import { openSse } from "../../support/sse.js"
import { uuid } from "../../support/tasks.js"
import { openaiEvent, openAISigner } from "../../support/webhooks.js"

/**
 * GET /metrics scraped by a real Prometheus (Debian's 2.42): two runner processes on PostgreSQL, Redis and RocketMQ,
 * a small workload through the API, the simulator's webhooks and an SSE client, then PromQL through Prometheus' HTTP
 * API until every series the operators' dashboards need is there and non-zero (or, for a backlog that is empty in a
 * healthy run, there on both runners).
 */
const prometheus = services.prometheusPath
const hasPrometheus = fs.existsSync(prometheus)
if (!hasPrometheus && isCI) {
  throw new Error(`CI=true but ${prometheus} is missing: .ci/run installs Debian's prometheus`)
}
const redisUrl = services.redisUrl
const endpoints = services.rocketmqEndpoints
const skip = noDatabase || redisUrl === undefined || !hasPrometheus

const suffix = uuid().slice(0, 8)
const topic = `test-metrics-${suffix}`
const group = `test-metrics-dispatcher-${suffix}`
const SECRET = "metrics-test-secret-0123456789abcdef"
const METRICS_TOKEN = `scrape-${uuid()}`

const [simPort, httpA, runnerA, httpB, runnerB, promPort] = await Effect.runPromise(
  Effect.all([freePort, freePort, freePort, freePort, freePort, freePort])
)
const platformA = `http://127.0.0.1:${httpA}`
const sim = `http://127.0.0.1:${simPort}`
const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "prometheus-test-"))

beforeAll(() => {
  if (!skip && endpoints !== undefined) rocketmqScript("topic", topic, group)
}, scaled(300_000))
afterAll(() => {
  if (!skip && endpoints !== undefined) rocketmqScript("drop", topic, group)
  fs.rmSync(scratch, { recursive: true, force: true })
})

class DbUrl extends Context.Tag("DbUrl")<DbUrl, string>() {}
const DbUrlLive = Layer.scoped(DbUrl, Effect.map(makeTestDatabaseUrl, ({ url }) => url))
const StoresLive = Layer.unwrapEffect(
  Effect.map(
    DbUrl,
    (url) => layerStores(layerPostgres({ url: Redacted.make(url), maxConnections: 2, applicationName: "test" }))
  )
)
const TestLayer = Layer.mergeAll(layerSim(simPort, platformA), StoresLive.pipe(Layer.provideMerge(DbUrlLive))).pipe(
  Layer.provide(FetchHttpClient.layer),
  Layer.provide(quietLogs)
)

/** A runner on its own ports; both send OpenAI's callbacks to runner A (the simulator knows one address). */
const startRunner = (databaseUrl: string, httpPort: number, runnerPort: number) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const proc = spawnRunner({
        ...simulatorEnv(platformA, sim, ["openai", "runway"]),
        DATABASE_URL: databaseUrl,
        REDIS_URL: redisUrl!,
        REDIS_KEY_PREFIX: `test-${suffix}:`,
        ROCKETMQ_ENDPOINTS: endpoints ?? "",
        ROCKETMQ_TOPIC: topic,
        DISPATCHER_GROUP: group,
        AUTH_SECRET: SECRET,
        METRICS_TOKEN,
        METRICS_SAMPLE_INTERVAL: "1 second",
        HTTP_PORT: String(httpPort),
        RUNNER_PORT: String(runnerPort),
        POLL_INTERVAL_SCALE: "0.05",
        // a fifth of the provider's answers are 429s: with the default 3 attempts a task fails once in ~125 (CI's run
        // of 4c6ce07 drew it: "not all ready: failed, …"); the workload is to see 429s, not to fail tasks
        MAX_SUBMIT_ATTEMPTS: "12",
        PROVIDER_TIMEOUT: "2 seconds",
        RUNWAY_LOOKUP: "false",
        ORPHAN_FLAG_AFTER: "1",
        OBJECT_STORE_DIR: path.join(scratch, "objects"),
        OUTBOX_SWEEP_INTERVAL: "500 millis",
        SWEEP_INTERVAL: "1 second",
        LOG_LEVEL: "Error"
      })
      try {
        await waitForHttp(httpPort, proc)
      } catch (e) {
        proc.child.kill("SIGKILL")
        throw e
      }
      return proc
    }),
    (proc) => stop(proc, "runner")
  )

const stop = (proc: Proc, what: string) =>
  Effect.promise(async () => {
    proc.child.kill("SIGTERM")
    await withTimeout(proc.exited, 20_000, `${what} shutdown`).catch(() => proc.child.kill("SIGKILL"))
  })

/** Prometheus on its own port and storage, scraping both runners every second with the metrics token. */
const startPrometheus = Effect.acquireRelease(
  Effect.promise(async () => {
    const config = path.join(scratch, "prometheus.yml")
    fs.writeFileSync(
      config,
      [
        "global: { scrape_interval: 1s, evaluation_interval: 1s }",
        "scrape_configs:",
        "  - job_name: control-plane",
        "    scrape_timeout: 1s",
        `    authorization: { type: Bearer, credentials: "${METRICS_TOKEN}" }`,
        `    static_configs: [{ targets: ["127.0.0.1:${httpA}", "127.0.0.1:${httpB}"] }]`,
        ""
      ].join("\n")
    )
    const proc = spawnMarked(prometheus, [
      `--config.file=${config}`,
      `--storage.tsdb.path=${path.join(scratch, "tsdb")}`,
      `--web.listen-address=127.0.0.1:${promPort}`,
      "--log.level=warn"
    ], { PATH: process.env.PATH ?? "/usr/bin:/bin" })
    const deadline = Date.now() + scaled(60_000)
    for (;;) {
      if (proc.child.exitCode !== null) throw new Error(`prometheus exited:\n${proc.output()}`)
      const ready = await fetch(`http://127.0.0.1:${promPort}/-/ready`).then((r) => r.ok, () => false)
      if (ready) return proc
      if (Date.now() > deadline) throw new Error(`prometheus not ready:\n${proc.output()}`)
      await new Promise((r) => setTimeout(r, 200))
    }
  }),
  (proc) => stop(proc, "prometheus")
)

/** A request that names its URL when it fails (a runner that died shows as "connection refused" otherwise). */
const http = (url: string, init?: RequestInit) =>
  Effect.tryPromise({ try: () => fetch(url, init), catch: (e) => new Error(`${url}: ${String(e)}`) }).pipe(Effect.orDie)

/** One instant query: the value of its first sample (NaN when the result is empty). */
const query = (promql: string) =>
  Effect.promise(async () => {
    const res = await fetch(`http://127.0.0.1:${promPort}/api/v1/query?query=${encodeURIComponent(promql)}`)
    const body = (await res.json()) as {
      status: string
      error?: string
      data?: { result: Array<{ value: [number, string] }> }
    }
    if (body.status !== "success") throw new Error(`${promql}: ${body.error}`)
    const first = body.data!.result[0]
    return first === undefined ? NaN : Number(first.value[1])
  })

/** What Prometheus must answer after the workload: a PromQL query and what its value must satisfy. */
const expectations: ReadonlyArray<readonly [string, (v: number) => boolean]> = [
  // both runners are scraped
  [`count(up{job="control-plane"} == 1)`, (v) => v === 2],
  // transitions by source: admissions, callbacks and polls
  [`sum(task_transitions_total{source="api"})`, (v) => v > 0],
  [`sum(task_transitions_total{source="webhook"})`, (v) => v > 0],
  [`sum(task_transitions_total{source="poll"})`, (v) => v > 0],
  // intake: persist latency, verify failures, duplicates, callback lag, observations
  [`sum(webhook_persist_seconds_count{provider="openai"})`, (v) => v > 0],
  [`sum(webhook_callbacks_total{provider="openai",outcome="stored"})`, (v) => v > 0],
  [`sum(webhook_callbacks_total{provider="openai",outcome="duplicate"})`, (v) => v > 0],
  [`sum(webhook_verify_failures_total{provider="openai"})`, (v) => v > 0],
  [`sum(callback_lag_seconds_count{provider="openai"})`, (v) => v > 0],
  [`sum(task_observations_total{source="webhook"})`, (v) => v > 0],
  // polling: QPS by outcome, 429s among the provider's answers, quota use against its limit
  [`sum(provider_polls_total{provider="runway",outcome="ok"})`, (v) => v > 0],
  [`sum(provider_http_responses_total{status="429"}) / sum(provider_http_responses_total)`, (v) => v > 0 && v < 1],
  [`sum(quota_grants_total{provider="runway"})`, (v) => v > 0],
  [`max(quota_limit_qps{provider="runway"})`, (v) => v > 0],
  // group commit of task changes and of inbox rows
  [`sum(group_commit_batch_size_count{writer="task_store"})`, (v) => v > 0],
  [`sum(group_commit_seconds_count{writer="inbox"})`, (v) => v > 0],
  // delivery: commit → SSE frame, the open stream, Redis publish, RocketMQ consume lag, the relay
  [`sum(stream_delivery_seconds_count{transport="sse"})`, (v) => v > 0],
  [`sum(streams_open{transport="sse"})`, (v) => v >= 1],
  [`sum(bus_publish_seconds_count{outcome="ok"})`, (v) => v > 0],
  ...(endpoints === undefined ? [] : [
    [`sum(queue_consume_lag_seconds_count)`, (v: number) => v > 0] as const,
    // every receive that brought messages; at least one message each
    [`sum(queue_receive_batch_size_sum) / sum(queue_receive_batch_size_count)`, (v: number) => v >= 1] as const
  ]),
  [`sum(outbox_published_total)`, (v) => v > 0],
  // sampled from PostgreSQL by each runner: the orphan callback and the unknown submission are seen by both
  [`min(inbox_rows{status="orphan"})`, (v) => v > 0],
  [`min(tasks_submit_unknown)`, (v) => v > 0],
  [`max(poll_fallback_ratio)`, (v) => v > 0 && v < 1],
  [`count(outbox_backlog)`, (v) => v === 2],
  [`count(outbox_oldest_age_seconds)`, (v) => v === 2],
  [`count(inbox_rows{status="dead"})`, (v) => v === 2],
  [`count(notification_dead_letters)`, (v) => v === 2],
  [`count(tasks_manual_review)`, (v) => v === 2],
  // @effect/cluster's own gauges: both runners healthy, the shards split between them, entities and singletons
  [`count(effect_cluster_runners_healthy == 1)`, (v) => v === 2],
  [`count(effect_cluster_shards > 0)`, (v) => v === 2],
  [`sum(effect_cluster_shards)`, (v) => v === 300],
  [`sum(max_over_time(effect_cluster_entities{type="GenerationTask"}[10m]))`, (v) => v > 0],
  [`sum(effect_cluster_singletons)`, (v) => v > 0]
]

describe.skipIf(skip)("Prometheus scrapes two runners", () => {
  layer(TestLayer, { timeout: scaled(120_000), excludeTestServices: true })((it) => {
    it.effect("every series is present and non-zero after a small workload", () =>
      Effect.gen(function*() {
        const simulator = yield* Sim
        const url = yield* DbUrl
        const sql = yield* SqlClient.SqlClient
        // duplicated callbacks and some 429s from the query API, on jobs short enough for a test
        yield* simulator.setFaults({ jobDurationMs: 1500, duplicateWebhooks: 1, rate429: 0.2, retryAfterSeconds: 0 })
        const runners = yield* Effect.all([startRunner(url, httpA, runnerA), startRunner(url, httpB, runnerB)], {
          concurrency: 2
        })
        // a runner that dies mid-test says why (its requests would only show "connection refused")
        for (const [name, proc] of [["A", runners[0]], ["B", runners[1]]] as const) {
          void proc.exited.then((code) =>
            code !== null && code !== 0 && console.error(`runner ${name} exited ${code}:\n${proc.output()}`)
          )
        }

        // the route: the token is required, and what it serves is valid exposition (promtool, when installed)
        const refused = yield* http(`${platformA}/metrics`)
        expect(refused.status).toBe(401)
        const scraped = yield* http(`${platformA}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } })
        expect(scraped.status).toBe(200)
        expect(scraped.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8")
        const text = yield* Effect.promise(() => scraped.text())
        const promtool = path.join(path.dirname(prometheus), "promtool")
        if (fs.existsSync(promtool)) {
          const lint = spawnSync(promtool, ["check", "metrics"], { input: text, encoding: "utf8" })
          expect(lint.status, lint.stdout + lint.stderr).toBe(0)
        }
        yield* startPrometheus

        const token = yield* Effect.flatMap(
          TokenSigner,
          (s) => s.sign({ tenant_id: uuid() as TenantId, sub: uuid() as UserId, projects: "*" })
        ).pipe(Effect.provide(TokenSigner.Default.pipe(Layer.provide(withSettings({ AUTH_SECRET: SECRET })))))
        const headers = { authorization: `Bearer ${token}`, "content-type": "application/json" }
        const made = yield* http(`${platformA}/v1/projects`, { method: "POST", headers })
        expect(made.status).toBe(201)
        const project = ((yield* Effect.promise(() => made.json())) as { project_id: string }).project_id

        // a browser on runner B: every change reaches it through the outbox, RocketMQ, Redis and B's feed
        const browser = yield* openSse(`http://127.0.0.1:${httpB}/v1/projects/${project}/events`, headers)
        expect(browser.status).toBe(200)

        const create = (port: number, provider: "openai" | "runway") =>
          http(`http://127.0.0.1:${port}/v1/projects/${project}/tasks`, {
            method: "POST",
            headers: { ...headers, "idempotency-key": uuid() },
            body: JSON.stringify({
              provider,
              model: definitionOf(provider)!.exampleModel,
              prompt: "a lighthouse at dusk",
              duration_seconds: 4
            })
          }).pipe(
            Effect.tap((res) => expect(res.status).toBe(201)),
            Effect.flatMap((res) => Effect.promise(() => res.json() as Promise<{ task_id: string }>)),
            Effect.map((body) => body.task_id)
          )
        // OpenAI reports by callback (to runner A), Runway only by polls; created on both runners
        const tasks = yield* Effect.all([
          create(httpA, "openai"),
          create(httpB, "openai"),
          create(httpA, "runway"),
          create(httpB, "runway")
        ])
        // all four ready (the failure says where each one stopped)
        yield* sql<{ status: string; error_code: string | null }>`
          SELECT status, error_code FROM generation_tasks WHERE id IN ${sql.in(tasks)}`.pipe(
          Effect.filterOrFail(
            (rows) => rows.every((r) => r.status === "ready"),
            (rows) =>
              new Error(
                `not all ready: ${
                  rows.map((r) => r.error_code ? `${r.status} (${r.error_code})` : r.status).join(", ")
                }`
              )
          ),
          Effect.retry(Schedule.spaced(Duration.millis(250)).pipe(Schedule.upTo(scaledDuration(Duration.seconds(90))))),
          Effect.orDie
        )
        yield* until(
          "the browser saw every task ready",
          () => browser.events.filter((e) => e.event === "task.status" && e.data.includes("\"ready\"")).length >= 4,
          Duration.seconds(30)
        )

        // one change certainly made by a callback: polls beat callbacks to every change above when the machine is
        // loaded (CI once saw no webhook transition and a poll-fallback ratio of 1). A task whose status queries are
        // all answered 429 moves only by OpenAI's callback
        const openaiRoute = `openai/${definitionOf("openai")!.exampleModel}`
        yield* simulator.setFaults({ faultRoutes: [openaiRoute], faultKinds: ["query"], rate429: 1 })
        const byCallback = yield* create(httpA, "openai")
        yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM task_events WHERE task_id = ${byCallback} AND source = 'webhook'`.pipe(
          Effect.filterOrFail((rows) => rows[0]!.n > 0, () => new Error("no change made by a callback")),
          Effect.retry(Schedule.spaced(Duration.millis(250)).pipe(Schedule.upTo(scaledDuration(Duration.seconds(60))))),
          Effect.orDie
        )
        yield* simulator.setFaults({ faultRoutes: [], faultKinds: ["submit", "query"], rate429: 0.2 })

        // a forged callback, and a genuine one about a job no attempt knows (an orphan, flagged at once)
        const signed = openAISigner(devSecret("openai"))
        const orphan = openaiEvent(`video_${uuid()}`)
        const forged = yield* http(`${platformA}/webhooks/openai`, {
          method: "POST",
          headers: { "content-type": "application/json", ...signed(orphan, { secret: devSecret("replicate") }) },
          body: orphan
        })
        expect(forged.status).toBe(401)
        const genuine = yield* http(`${platformA}/webhooks/openai`, {
          method: "POST",
          headers: { "content-type": "application/json", ...signed(orphan) },
          body: orphan
        })
        expect(genuine.status).toBe(204)

        // at least one 429 among the provider's answers: a fifth of the calls above draw one, but a workload this short
        // can draw none (CI's run of 76b561e did, and the 429 ratio below was NaN). One more task, whose calls are all
        // answered 429 until one was; it then goes on as any other
        const throttled = simulator.stats.throttled
        yield* simulator.setFaults({ rate429: 1 })
        yield* create(httpB, "openai")
        yield* until("a provider call answered 429", () => simulator.stats.throttled > throttled, Duration.seconds(30))
        yield* simulator.setFaults({ rate429: 0.2 })

        // a submission whose answer never comes: SUBMIT_UNKNOWN, and Runway has no lookup here
        yield* simulator.setFaults({ submitAcceptThenTimeout: 1 })
        yield* create(httpA, "runway")

        // every expectation at once, from one Prometheus (a scrape a second), until all hold or the time is up
        const unmet = Effect.forEach(
          expectations,
          ([promql, ok]) => Effect.map(query(promql), (v) => (ok(v) ? [] : [`${promql} = ${v}`]))
        ).pipe(Effect.map((r) => r.flat()))
        let failing: ReadonlyArray<string> = []
        yield* unmet.pipe(
          Effect.tap((f) => Effect.sync(() => (failing = f))),
          Effect.filterOrFail((f) => f.length === 0),
          Effect.retry(Schedule.spaced(Duration.seconds(1)).pipe(Schedule.upTo(scaledDuration(Duration.seconds(60))))),
          Effect.ignore
        )
        expect(failing).toEqual([])
        browser.close()
      }).pipe(Effect.scoped), scaled(240_000))
  })
})
