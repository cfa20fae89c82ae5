import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import { WORKER_NODE_OPTIONS } from "../../../src/cli/cluster/plan.js"
import { TokenSigner } from "../../../src/http/Auth.js"
import { definitionOf } from "../../../src/providers/providers.js"
import type { TenantId, UserId } from "../../../src/schema/ids.js"
import { operatorToken, shardCounts, until } from "../../support/admin.js"
import { makeTestDatabaseUrl, noDatabase } from "../../support/database.js"
import { scaled, services } from "../../support/env.js"
import { metricOn } from "../../support/metrics.js"
import { killAll, probe, spawnNpm } from "../../support/npmStart.js"
import { allocatePort } from "../../support/ports.js"
import { withTimeout } from "../../support/processes.js"
import { withSettings } from "../../support/runner.js"
import { openSse } from "../../support/sse.js"
import { uuid } from "../../support/tasks.js"

const redisUrl = services.redisUrl
const AUTH_SECRET = "cluster-command-test-secret-0123456789abcdef"

/** `n` consecutive free ports from this process's block (ports.ts hands them out in order, skipping busy ones). */
const consecutivePorts = async (n: number): Promise<ReadonlyArray<number>> => {
  let run = [await allocatePort()]
  while (run.length < n) {
    const next = await allocatePort()
    run = next === run.at(-1)! + 1 ? [...run, next] : [next]
  }
  return run
}

interface Started {
  readonly message: string
  readonly pid?: number
  readonly process?: number
  readonly node_options?: string
}

/** The cluster command's own JSON log lines that name a process it started. */
const startedLines = (output: string): ReadonlyArray<Started> =>
  output.split("\n").flatMap((line) => {
    if (!line.startsWith("{")) return []
    try {
      const parsed = JSON.parse(line) as Started
      return typeof parsed.pid === "number" ? [parsed] : []
    } catch {
      return []
    }
  })

const alive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

/**
 * `npm run cluster` as an operator runs it: three runner processes on one machine behind nginx, an edge one (the API,
 * webhooks and a gateway: a cluster client, no shards), a second gateway, and one with the worker roles, on a fresh
 * database, Redis, and the provider simulator the command starts. Everything goes through the one entry, a project's
 * streams to one gateway; then one SIGTERM to the command stops every process.
 */
describe.skipIf(noDatabase || redisUrl === undefined)("npm run cluster", () => {
  it.live(
    "serves a task through one entry from an edge process to a worker process, keeps each project's streams on one gateway, and stops on one signal",
    () =>
      Effect.gen(function*() {
        const { url } = yield* makeTestDatabaseUrl
        const [entry, edgeHttp, gatewayHttp, workerHttp] = yield* Effect.promise(() => consecutivePorts(4))
        const [edgeRunner, , workerRunner] = yield* Effect.promise(() => consecutivePorts(3))
        const simPort = yield* Effect.promise(allocatePort)
        const base = `http://127.0.0.1:${entry}`
        const cluster = spawnNpm([
          "run",
          "-s",
          "cluster",
          "--",
          "--processes",
          "3",
          "--roles",
          "api,webhooks,gateway;gateway;entities,singletons,dispatcher",
          "--port",
          String(entry),
          "--first-runner-port",
          String(edgeRunner)
        ], {
          DATABASE_URL: url,
          REDIS_URL: redisUrl!,
          REDIS_KEY_PREFIX: `test-${uuid().slice(0, 8)}:`,
          ROCKETMQ_ENDPOINTS: "",
          AUTH_SECRET,
          SIMULATOR_PORT: String(simPort),
          POLL_INTERVAL_SCALE: "0.05",
          DB_POOL_SIZE: "4",
          OUTBOX_SWEEP_INTERVAL: "500 millis",
          LOG_FORMAT: "json",
          LOG_LEVEL: "Info",
          // none of the test run's: the command chooses each process's own
          NODE_OPTIONS: ""
        })
        // on a failure: npm, and each process the command started with its group (nginx rewrites its environment, so
        // the run's mark alone does not find it)
        yield* Effect.addFinalizer(() =>
          Effect.sync(() => {
            killAll(cluster)
            for (const { pid } of startedLines(cluster.output())) {
              try {
                process.kill(-pid!, "SIGKILL")
              } catch {
                // gone
              }
            }
          })
        )
        yield* Effect.promise(() =>
          withTimeout(
            new Promise<void>((resolve, reject) => {
              const look = setInterval(() => {
                if (cluster.output().includes("cluster ready")) resolve(clearInterval(look))
                if (cluster.child.exitCode !== null) reject(new Error(`cluster exited:\n${cluster.output()}`))
              }, 250)
            }),
            180_000,
            "cluster ready"
          )
        ).pipe(Effect.tapDefect(() => Effect.sync(() => console.error(cluster.output()))))

        // each process keeps its own address; only the worker watches shard locks (the edge is a cluster client)
        const readiness = (port: number) =>
          Effect.promise(() =>
            fetch(`http://127.0.0.1:${port}/readyz`).then((r) =>
              r.json() as Promise<{ checks: Array<{ name: string }> }>
            )
          )
        expect((yield* readiness(edgeHttp)).checks.map((c) => c.name)).not.toContain("shard_locks")
        expect((yield* readiness(workerHttp)).checks.map((c) => c.name)).toContain("shard_locks")
        const roles = yield* Effect.promise(() => fetch(`http://127.0.0.1:${edgeHttp}/metrics`).then((r) => r.text()))
        expect(roles).toContain(`runner_role{role="entities"} 0`)
        expect(roles).toContain(`runner_role{role="api"} 1`)
        // the worker has no API: it says so rather than serving it
        expect(yield* Effect.promise(() => probe(workerHttp, "/v1/projects"))).toBe(404)
        // the worker runs with larger V8 semi-spaces (plan.ts nodeOptionsFor), the edges with V8's default
        const members = startedLines(cluster.output()).filter((l) => l.process !== undefined)
        expect(members.map((l) => [l.process, l.node_options])).toEqual([[1, ""], [2, ""], [3, WORKER_NODE_OPTIONS]])
        const environ = fs.readFileSync(`/proc/${members[2]!.pid}/environ`, "utf8").split("\0")
        expect(environ).toContain(`NODE_OPTIONS=${WORKER_NODE_OPTIONS}`)

        // every shard on the worker, none on the edge (it never registers as a runner)
        const operator = yield* operatorToken(AUTH_SECRET)
        const counts = yield* until(
          "the worker holds every shard",
          shardCounts(entry, operator),
          (c) => c.get(`127.0.0.1:${workerRunner}`) === 300,
          "60 seconds"
        )
        expect([...counts.keys()]).toEqual([`127.0.0.1:${workerRunner}`])

        // a browser and a product backend through the entry: the API (edge) creates, the entity (worker) runs it,
        // and the stream (edge, through nginx) sees it ready
        const token = yield* Effect.flatMap(
          TokenSigner,
          (s) => s.sign({ tenant_id: uuid() as TenantId, sub: uuid() as UserId, projects: "*" })
        ).pipe(Effect.provide(TokenSigner.Default.pipe(Layer.provide(withSettings({ AUTH_SECRET })))))
        const headers = { authorization: `Bearer ${token}`, "content-type": "application/json" }
        const json = <A>(path: string, init: RequestInit = {}) =>
          Effect.promise(async () => {
            const res = await fetch(`${base}${path}`, { ...init, headers: { ...headers, ...init.headers } })
            return { status: res.status, body: (await res.json()) as A }
          })
        const project = yield* json<{ project_id: string }>("/v1/projects", { method: "POST" })
        expect(project.status).toBe(201)
        const projectId = project.body.project_id
        const stream = yield* openSse(`${base}/v1/projects/${projectId}/events`, headers)
        expect(stream.status).toBe(200)
        const created = yield* json<{ task_id: string }>(`/v1/projects/${projectId}/tasks`, {
          method: "POST",
          headers: { "idempotency-key": uuid() },
          body: JSON.stringify({
            provider: "openai",
            model: definitionOf("openai")!.exampleModel,
            prompt: "a lighthouse at dusk",
            duration_seconds: 4
          })
        })
        expect(created.status).toBe(201)
        const taskId = created.body.task_id
        yield* until(
          "the task is ready",
          json<{ status: string }>(`/v1/projects/${projectId}/tasks/${taskId}`).pipe(Effect.map((r) => r.body.status)),
          (status) => status === "ready",
          "90 seconds"
        )
        yield* until(
          "the stream through the entry saw it ready",
          Effect.sync(() => stream.events.filter((e) => e.event === "task.status").map((e) => e.data)),
          (frames) => frames.some((d) => d.includes(taskId) && d.includes("\"ready\"")),
          "30 seconds"
        )
        stream.close()

        // a project's streams all reach one gateway (nginx hashes the project id), which then follows it alone;
        // round-robin put two of four on each
        // no WebSocket is opened: every open stream is an SSE one
        const perGateway = Effect.all([metricOn(edgeHttp, "streams_open"), metricOn(gatewayHttp, "streams_open")])
        yield* until("the first stream closed", perGateway, ([a, b]) => a + b === 0, "30 seconds")
        const second = yield* json<{ project_id: string }>("/v1/projects", { method: "POST" })
        const opened: Array<{ readonly close: () => void }> = []
        for (const [k, project] of [projectId, second.body.project_id].entries()) {
          const streams = yield* Effect.forEach(
            [1, 2, 3, 4],
            () => openSse(`${base}/v1/projects/${project}/events`, headers)
          )
          opened.push(...streams)
          expect(streams.map((s) => s.status)).toEqual([200, 200, 200, 200])
          const counts = yield* until("the streams opened", perGateway, ([a, b]) => a + b === 4 * (k + 1), "30 seconds")
          expect(counts.map((n) => n % 4), `streams per gateway: ${counts}`).toEqual([0, 0])
        }
        opened.forEach((s) => s.close())
        // the task's entity ran on the worker, never on the edge (a cluster client hosts none): observations applied
        const observations = (port: number) => metricOn(port, "task_observations_total")
        expect(yield* observations(workerHttp)).toBeGreaterThan(0)
        expect(yield* observations(edgeHttp)).toBe(0)

        // one SIGTERM to the command (npm): every process it started exits, and so does it
        const started = startedLines(cluster.output())
        expect(started.map((l) => l.message).sort()).toEqual(
          [
            `nginx on 127.0.0.1:${entry}`,
            "process 1 started",
            "process 2 started",
            "process 3 started",
            `provider simulator on 127.0.0.1:${simPort}`
          ]
            .sort()
        )
        expect(cluster.processes().length).toBeGreaterThanOrEqual(5)
        const signalled = Date.now()
        process.kill(cluster.child.pid!, "SIGTERM")
        const code = yield* Effect.promise(() => withTimeout(cluster.exited, 90_000, "the cluster to stop"))
        yield* Effect.logWarning(`SIGTERM to npm run cluster: every process exited within ${Date.now() - signalled} ms`)
        expect(code).toBe(0)
        expect(started.filter((l) => alive(l.pid!))).toEqual([])
        expect(cluster.processes()).toEqual([])
        expect(cluster.output()).toContain("cluster stopped: every process exited")
        expect(yield* Effect.promise(() => probe(entry, "/healthz"))).toBe("refused")
      }).pipe(Effect.scoped),
    scaled(300_000)
  )
})

describe("npm run cluster refuses", () => {
  it(
    "a deployment without DATABASE_URL, or one missing a role, with one line and exit 1, starting nothing",
    async () => {
      for (
        const [settings, args, line] of [
          [
            {},
            [],
            "cluster: DATABASE_URL: required: the processes share one PostgreSQL (the embedded PGlite serves one " +
            "process: npm start)"
          ],
          [
            { DATABASE_URL: "postgres://postgres@127.0.0.1:1/none", REDIS_URL: "redis://127.0.0.1:1" },
            ["--roles", "api,webhooks,gateway"],
            "cluster: --roles: no process has entities, singletons, dispatcher: every role must run somewhere"
          ]
        ] as const
      ) {
        const cluster = spawnNpm(["run", "-s", "cluster", "--", "--processes", "2", ...args], settings)
        try {
          expect(await withTimeout(cluster.exited, 60_000, "cluster refusal")).toBe(1)
          expect(cluster.output().trimEnd().split("\n")).toEqual([line])
        } finally {
          killAll(cluster)
        }
      }
    },
    scaled(120_000)
  )
})
