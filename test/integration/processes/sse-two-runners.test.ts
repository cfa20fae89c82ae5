import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Layer, Redacted } from "effect"
import { TokenSigner } from "../../../src/http/Auth.js"
import * as Database from "../../../src/persistence/Database.js"
import { layerStores } from "../../../src/runners/Runner.js"
import type { ProjectId, UserId } from "../../../src/schema/ids.js"
import { makeTestDatabaseUrl, noDatabase } from "../../support/database.js"
import { scaled } from "../../support/env.js"
import { spawnRunner, waitForHttp } from "../../support/processes.js"
import { until } from "../../support/propagation.js"
import { freePort, withSettings } from "../../support/runner.js"
import { openSse, payloads, seqOf, type SseClient } from "../../support/sse.js"
import { commitChange, redisUrl, storedEvents, TENANT } from "../../support/streams.js"
import { admitTask, uuid } from "../../support/tasks.js"

const AUTH_SECRET = "two-runners-test-secret-0123456789abcdef"

/**
 * Two runner processes behind no load balancer: a browser's stream is on runner A; A is killed (SIGKILL, no
 * goodbye); the client reconnects to runner B with its Last-Event-ID and resumes with no gap, while a writer keeps
 * committing the whole time (the outbox relay moves to B with A's shards).
 */
describe.skipIf(noDatabase || redisUrl === undefined)("two runners", () => {
  it.live("a client reconnects to the other runner and resumes by cursor with no gap", () =>
    Effect.gen(function*() {
      const { url } = yield* makeTestDatabaseUrl
      const prefix = `test-${uuid().slice(0, 8)}:`
      // each runner on ports no other caller of this process was given (test/support/ports.ts)
      const start = Effect.acquireRelease(
        Effect.promise(async () => {
          const [httpPort, runnerPort] = await Effect.runPromise(Effect.all([freePort, freePort]))
          const proc = spawnRunner({
            DATABASE_URL: url,
            REDIS_URL: redisUrl!,
            REDIS_KEY_PREFIX: prefix,
            ROCKETMQ_ENDPOINTS: "",
            EMBEDDED_SIMULATOR: "false",
            AUTH_SECRET,
            HTTP_PORT: String(httpPort),
            RUNNER_PORT: String(runnerPort),
            OUTBOX_SWEEP_INTERVAL: "500 millis",
            LOG_LEVEL: "Error"
          })
          try {
            await waitForHttp(httpPort, proc)
          } catch (e) {
            proc.child.kill("SIGKILL")
            throw e
          }
          return { ...proc, httpPort }
        }),
        (proc) => Effect.sync(() => proc.child.kill("SIGKILL"))
      )
      // both at once, on an empty database: both create @effect/cluster's tables, and the loser of that race (seen
      // once in ten runs: pg_type_typname_nsp_index) must try again and come up (src/runners/Cluster.ts)
      const [a, b] = yield* Effect.all([start, start], { concurrency: 2 })
      const [httpA, httpB] = [a.httpPort, b.httpPort]

      const stores = layerStores(Database.layerPostgres({ url: Redacted.make(url), maxConnections: 4 }))
      const projectId = uuid() as ProjectId
      const token = yield* Effect.flatMap(TokenSigner, (s) =>
        s.sign({ tenant_id: TENANT, sub: uuid() as UserId, projects: [projectId] })).pipe(
          Effect.provide(TokenSigner.Default.pipe(Layer.provide(withSettings({ AUTH_SECRET }))))
        )
      const { taskId } = yield* admitTask({ projectId, tenantId: TENANT }).pipe(Effect.provide(stores))
      const headers = { authorization: `Bearer ${token}` }
      const events = (port: number) =>
        `http://127.0.0.1:${port}/v1/projects/${projectId}/events`

      const first = yield* openSse(`${events(httpA)}?after=0-0`, headers)
      // the first cursor the client holds comes from a reset (0-0 is not this stream's epoch)
      yield* until("reset", () => first.events.some((e) => e.event === "reset"))
      const startSeq = seqOf(first.events[0]!.id!)

      const COMMITS = 120
      const writer = yield* Effect.forEach(
        Array.from({ length: COMMITS }, (_, i) => i),
        (i) =>
          commitChange(taskId, { status: "running", stage: "generating", progress: i % 100 }).pipe(
            Effect.zipRight(Effect.sleep(Duration.millis(40)))
          ),
        { discard: true }
      ).pipe(Effect.provide(stores), Effect.fork)

      yield* until("some events on A", () => payloads(first).length >= 20, Duration.seconds(20))
      a.child.kill("SIGKILL")
      yield* until("A's stream is gone", () => first.ended(), Duration.seconds(10))
      const lastId = payloads(first).at(-1)!.id
      const second: SseClient = yield* openSse(events(httpB), { ...headers, "last-event-id": lastId })
      expect(second.status).toBe(200)
      yield* writer.await
      yield* until(
        "every event",
        () => payloads(first).length + payloads(second).length >= COMMITS,
        Duration.seconds(40)
      )
      const stored = yield* storedEvents(projectId, startSeq).pipe(Effect.provide(stores))
      const got = [...payloads(first), ...payloads(second)].map((e) => seqOf(e.id))
      expect(got).toEqual(stored.map((r) => Number(r.cursor_seq)))
      expect(payloads(second).length).toBeGreaterThan(0)
      second.close()
    }).pipe(Effect.scoped), scaled(240_000))
})
