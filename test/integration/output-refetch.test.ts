import { FetchHttpClient } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Duration, Effect, Layer, Option, Schedule } from "effect"
import { ObjectStore, ObjectStoreError } from "../../src/output/ObjectStore.js"
import { layerFromEnv } from "../../src/output/ObjectStoreLive.js"
import { TaskOperations } from "../../src/persistence/TaskOperations.js"
import type { AttemptId, TaskId } from "../../src/schema/ids.js"
import { simulatorEnv } from "../../src/simulator/embedded.js"
import { adminClient } from "../support/admin.js"
import { layerTestDatabase, noDatabase } from "../support/database.js"
import { scaled, scaledDuration } from "../support/env.js"
import { expectBalanced, ledgers, startTask, waitForStatus } from "../support/lifecycle.js"
import { freePort, layerTestRunner, quietLogs, withSettings } from "../support/runner.js"
import { layerS3rver, TestS3 } from "../support/s3.js"
import { layerRunnerHttp, layerSim, Sim } from "../support/simulator.js"
import { uuid } from "../support/tasks.js"

/**
 * Issue #15, part 1: outputs in a shared S3-compatible store (s3rver here), and an output object missing at the probe
 * (the filesystem of another host after a shard move, an object lost or removed) downloaded again while the
 * provider's URL is valid; past its deadline the task fails with output_unavailable. And a download is not repeated
 * for an object that is already in the store.
 *
 * The runner's store is the real S3 store with one thing added: what happens right after an upload, per the rule in
 * force when the key is first written — the object lost (deleted: the probe will not find it) or the runner "dying"
 * before it records the upload (the put fails after the object is stored).
 */
type Rule = "keep" | "lose_first" | "lose_all" | "fail_first"
let rule: Rule = "keep"
const rules = new Map<string, { readonly rule: Rule; puts: number }>()

const lossy = Layer.effect(
  ObjectStore,
  Effect.map(ObjectStore, (real) =>
    ObjectStore.of({
      ...real,
      put: (key, body, contentType) =>
        Effect.tap(real.put(key, body, contentType), () => {
          const r = rules.get(key) ?? { rule, puts: 0 }
          rules.set(key, r)
          r.puts++
          if (r.rule === "lose_all" || (r.rule === "lose_first" && r.puts === 1)) return real.delete(key)
          if (r.rule === "fail_first" && r.puts === 1) {
            return Effect.fail(new ObjectStoreError({ message: "the runner died after the upload (simulated)" }))
          }
          return Effect.void
        })
    }))
).pipe(Layer.provide(layerFromEnv))

const [httpPort, simPort] = await Effect.runPromise(Effect.all([freePort, freePort]))
const platform = `http://127.0.0.1:${httpPort}`
const sim = `http://127.0.0.1:${simPort}`
// long enough for a loss and a second download on a loaded machine, short enough to watch one expire
const URL_TTL_MS = scaled(8_000)
const settings = {
  ...simulatorEnv(platform, sim, ["runway"]),
  POLL_INTERVAL_SCALE: "0.05",
  PROVIDER_TIMEOUT: "1 second",
  REDIS_KEY_PREFIX: `test-${uuid()}:`,
  SWEEP_INTERVAL: "1 second",
  SWEEP_GRACE: "3 seconds",
  OUTPUT_URL_TTL: `${URL_TTL_MS} millis`
}

const TestLayer = Layer.unwrapEffect(Effect.map(TestS3, (s3) =>
  layerSim(simPort, platform).pipe(
    Layer.provideMerge(
      layerRunnerHttp(httpPort).pipe(
        Layer.provideMerge(
          TaskOperations.Default.pipe(
            Layer.provideMerge(layerTestRunner(layerTestDatabase(), { lifecycle: true, objectStore: lossy }))
          )
        )
      )
    ),
    Layer.provide(FetchHttpClient.layer),
    Layer.provide(quietLogs),
    Layer.provide(withSettings({ ...settings, ...s3.settings }))
  ))).pipe(Layer.provideMerge(layerS3rver()))

/** The bucket as another runner sees it. */
const headInBucket = (key: string) =>
  Effect.flatMap(TestS3, (s3) =>
    Effect.flatMap(ObjectStore, (store) => store.head(key)).pipe(
      Effect.provide(layerFromEnv.pipe(Layer.provide(withSettings(s3.settings))))
    ))

const history = (taskId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ status: string }>`
      SELECT public_payload->>'status' AS status FROM task_events WHERE task_id = ${taskId} ORDER BY task_version`)
    .pipe(Effect.map((rows) => rows.map((r) => r.status).join(" → ")), Effect.orDie)

const fetchOperation = (taskId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{ status: string; attempts: number; result: { sha256: string; bytes: number } | null }>`
      SELECT status, attempts, result FROM task_operations
      WHERE task_id = ${taskId} AND operation_type = 'fetch_output'`
  ).pipe(
    Effect.map((rows) => rows[0]!),
    Effect.orDie
  )

/** Starts a runway task under `r` and waits for one of `wanted`; returns it with the downloads it caused. */
const runUnder = <E = never, R = never>(
  r: Rule,
  wanted: ReadonlyArray<string>,
  within: Duration.Duration,
  meanwhile?: (taskId: string) => Effect.Effect<void, E, R>
) =>
  Effect.gen(function*() {
    const simulator = yield* Sim
    yield* simulator.setFaults({ jobDurationMs: 500 })
    rule = r
    const before = simulator.stats.downloads
    const t = yield* startTask("runway")
    if (meanwhile !== undefined) yield* meanwhile(t.taskId)
    const [row] = yield* waitForStatus([t.taskId], wanted, within)
    return { ...t, row: row!, downloads: simulator.stats.downloads - before }
  })

describe.skipIf(noDatabase)("outputs in a shared object store: lost objects fetched again", () => {
  layer(TestLayer, { timeout: scaled(120_000), excludeTestServices: true })((it) => {
    it.effect("fetched, then the object is gone at the probe: downloaded again, ready with its output", () =>
      Effect.gen(function*() {
        const t = yield* runUnder("lose_first", ["ready", "failed"], Duration.seconds(60))
        const key = `${t.taskId}/${t.attemptId}/output.mp4`
        expect({ status: t.row.status, asset: t.row.asset_id }).toEqual({ status: "ready", asset: key })
        expect(yield* history(t.taskId)).toContain(
          "processing_media → output_at_risk → fetching_output → processing_media → ready"
        )
        expect(t.downloads).toBe(2)
        const op = yield* fetchOperation(t.taskId)
        expect({ status: op.status, attempts: op.attempts }).toEqual({ status: "done", attempts: 2 })
        const stored = yield* headInBucket(key)
        expect(Option.map(stored, (o) => ({ bytes: o.bytes, sha256: o.sha256 }))).toEqual(
          Option.some({ bytes: op.result!.bytes, sha256: op.result!.sha256 })
        )
        expectBalanced(yield* ledgers([t.taskId]), expect)
      }))

    it.effect("stored, then the runner died before recording it: the next owner finds the object, no second download", () =>
      Effect.gen(function*() {
        const t = yield* runUnder("fail_first", ["ready", "failed"], Duration.seconds(60))
        expect(t.row.status).toBe("ready")
        expect(yield* history(t.taskId)).toContain("fetching_output → output_at_risk → fetching_output")
        expect(t.downloads).toBe(1)
        expect((yield* fetchOperation(t.taskId)).status).toBe("done")
      }))

    it.effect("lost every time: downloaded again until the URL's deadline, then failed with output_unavailable", () =>
      Effect.gen(function*() {
        // meanwhile operators see it among the pending outputs (GET /admin/outputs, `npm run ops -- outputs`)
        const listed = (taskId: string) =>
          Effect.gen(function*() {
            const admin = yield* adminClient(platform)
            const view = yield* admin.outputs.pending({ urlParams: {} })
            const mine = view.outputs.find((o) => o.task_id === taskId)
            if (mine === undefined || mine.deadline_at === null || mine.claims < 2) {
              return yield* Effect.fail("not listed with its deadline and two claims yet")
            }
          }).pipe(Effect.retry(Schedule.spaced(Duration.millis(100)).pipe(Schedule.upTo(scaledDuration("30 seconds")))))
        const t = yield* runUnder("lose_all", ["ready", "failed"], Duration.millis(URL_TTL_MS + 60_000), listed)
        expect(t.row.status).toBe("failed")
        expect(t.downloads).toBeGreaterThanOrEqual(2)
        const sql = yield* SqlClient.SqlClient
        const [task] = yield* sql<{ error_code: string; late: boolean }>`
          SELECT t.error_code, t.updated_at >= a.output_deadline_at AS late
          FROM generation_tasks t JOIN task_attempts a ON a.id = t.current_attempt_id WHERE t.id = ${t.taskId}`
        expect(task).toEqual({ error_code: "output_unavailable", late: true })
        expectBalanced(yield* ledgers([t.taskId]), expect)
      }))

    it.effect("the fetch's lease: a second claimer waits while the holder renews, and takes over once it lapses", () =>
      Effect.gen(function*() {
        const ops = yield* TaskOperations
        const sql = yield* SqlClient.SqlClient
        const [row] = yield* sql<{ id: TaskId }>`SELECT id FROM generation_tasks LIMIT 1`
        const taskId = row!.id
        const attemptId = uuid() as AttemptId
        const lease = 400
        const first = yield* ops.claim(taskId, attemptId, "fetch_output", null, lease)
        expect(first._tag).toBe("Claimed")
        const token = (first as { token: number }).token
        expect((yield* ops.claim(taskId, attemptId, "fetch_output", null, lease))._tag).toBe("Leased")
        expect(yield* ops.renew(taskId, attemptId, "fetch_output", token, 60_000)).toBe(true)
        expect((yield* ops.claim(taskId, attemptId, "fetch_output", null, lease))._tag).toBe("Leased")
        // the holder goes silent: its lease lapses, and the next claim takes the operation with a new token
        yield* ops.renew(taskId, attemptId, "fetch_output", token, lease)
        const taken = yield* ops.claim(taskId, attemptId, "fetch_output", null, lease).pipe(
          Effect.filterOrFail((c) => c._tag === "Claimed"),
          Effect.retry(Schedule.spaced(Duration.millis(100)).pipe(Schedule.upTo(scaledDuration("30 seconds"))))
        )
        expect((taken as { token: number }).token).toBe(token + 1)
        expect(yield* ops.renew(taskId, attemptId, "fetch_output", token, lease)).toBe(false)
        yield* ops.complete(taskId, attemptId, "fetch_output", { bytes: 1 })
        expect(yield* ops.claim(taskId, attemptId, "fetch_output", null, lease)).toMatchObject({
          _tag: "Done",
          result: { bytes: 1 }
        })
        expect(yield* ops.reopen(taskId, attemptId, "fetch_output", "object missing")).toBe(true)
        expect((yield* ops.claim(taskId, attemptId, "fetch_output", null, lease))._tag).toBe("Claimed")
      }))
  })
})
