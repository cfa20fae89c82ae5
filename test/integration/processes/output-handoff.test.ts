import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Duration, Effect, Schedule } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import pg from "pg"
import { outputKey } from "../../../src/entities/outputSteps.js"
import { noDatabase } from "../../support/database.js"
import { scaled, scaledDuration } from "../../support/env.js"
import { spawnRunner, waitForHttp, withTimeout } from "../../support/processes.js"
import { DbUrl, layerRunwayFixture, runwayRunnerEnv, tempFolder, twoRunnerPorts } from "../../support/runwayRunners.js"
import { Sim } from "../../support/simulator.js"
import { admitTask } from "../../support/tasks.js"

/**
 * Issue #15 part 1, with a real shard move: outputs on each runner's own disk (the filesystem store, as on two
 * hosts). Runner A downloads the output and records the fetch done; it is SIGKILLed before it probes the file (its
 * commit of processing_media is held at a lock of the test's, then lost with the process). Runner B takes the task
 * over: the fetch is recorded done but the file is on A's disk, so B's probe misses it, and the output is downloaded
 * again (within the URL's deadline) into B's store: the task ends ready, not output_unavailable, with one submission.
 */
const { simPort, httpA, runnerA, httpB, runnerB, sim, keyPrefix } = await twoRunnerPorts()
const diskA = tempFolder("output-handoff-a")
const diskB = tempFolder("output-handoff-b")

/** The advisory lock the held commit waits for (the test holds it on a connection of its own). */
const HOLD = 15_150_001

const runner = (databaseUrl: string, httpPort: number, runnerPort: number, objects: string) =>
  spawnRunner({
    ...runwayRunnerEnv({ databaseUrl, httpPort, runnerPort, sim, objects, keyPrefix }),
    POLL_INTERVAL_SCALE: "0.05"
  })

const status = (taskId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ status: string }>`
    SELECT status FROM generation_tasks WHERE id = ${taskId}`).pipe(Effect.map((rows) => rows[0]!.status), Effect.orDie)

const until = <A, R>(what: string, check: Effect.Effect<A, unknown, R>, seconds: number) =>
  check.pipe(
    Effect.retry(Schedule.spaced(Duration.millis(100)).pipe(Schedule.upTo(scaledDuration(Duration.seconds(seconds))))),
    Effect.mapError(() => new Error(`${what}: not within ${seconds} s (scaled)`)),
    Effect.orDie
  )

describe.skipIf(noDatabase)("an output fetched on one runner's disk, probed on another after a shard move", () => {
  layer(layerRunwayFixture(simPort), { timeout: scaled(180_000), excludeTestServices: true })((it) => {
    it.scoped("the probe misses the file, the output is downloaded again on the new owner, and the task ends ready", () =>
      Effect.gen(function*() {
        const simulator = yield* Sim
        const url = yield* DbUrl
        const sql = yield* SqlClient.SqlClient
        yield* simulator.setFaults({ jobDurationMs: 1_000, queuedShare: 0 })
        // the first commit of processing_media waits for the test's lock (inside runner A's transaction)
        yield* sql.unsafe(`
          CREATE FUNCTION test_hold_probe() RETURNS trigger LANGUAGE plpgsql AS $$
          BEGIN PERFORM pg_advisory_xact_lock(${HOLD}); RETURN NEW; END $$;
          CREATE TRIGGER test_hold_probe BEFORE UPDATE ON generation_tasks FOR EACH ROW
          WHEN (NEW.status = 'processing_media') EXECUTE FUNCTION test_hold_probe();`)
        const holder = new pg.Client({ connectionString: url })
        yield* Effect.promise(() => holder.connect())
        yield* Effect.addFinalizer(() => Effect.promise(() => holder.end().catch(() => undefined)))
        yield* Effect.promise(() => holder.query(`SELECT pg_advisory_lock(${HOLD})`))

        const task = yield* admitTask({ provider: "runway" })
        const a = runner(url, httpA, runnerA, diskA)
        yield* Effect.promise(() => waitForHttp(httpA, a))
        // A has downloaded the output onto its disk, recorded the fetch, and waits to commit processing_media
        yield* until(
          "runner A's commit of processing_media waits for the lock",
          Effect.flatMap(
            sql<{ n: number }>`
              SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
              AND objid = ${HOLD}`,
            (rows) => rows[0]!.n > 0 ? Effect.void : Effect.fail("not yet")
          ),
          60
        )
        const fetched = yield* sql<{ status: string }>`
          SELECT status FROM task_operations WHERE task_id = ${task.taskId} AND operation_type = 'fetch_output'`
        expect(fetched.map((r) => r.status)).toEqual(["done"])
        const state = yield* status(task.taskId)
        expect(state).toBe("fetching_output")
        const key = outputKey({ task: { id: task.taskId }, attempt: { id: task.attemptId } } as never)
        expect(fs.existsSync(path.join(diskA, key))).toBe(true)
        expect(simulator.stats.downloads).toBe(1)

        a.child.kill("SIGKILL")
        yield* Effect.promise(() => withTimeout(a.exited, 10_000, "kill -9"))
        yield* sql.unsafe(`DROP TRIGGER test_hold_probe ON generation_tasks; DROP FUNCTION test_hold_probe();`)
        yield* Effect.promise(() => holder.query(`SELECT pg_advisory_unlock(${HOLD})`))

        const b = runner(url, httpB, runnerB, diskB)
        try {
          yield* Effect.promise(() => waitForHttp(httpB, b))
          yield* until(
            "the task ready on runner B",
            Effect.flatMap(status(task.taskId), (s) => s === "ready" ? Effect.void : Effect.fail(s)),
            90
          )
          // B found no file at the probe and downloaded the output again, into its own store
          expect(fs.existsSync(path.join(diskB, key))).toBe(true)
          expect(simulator.stats.downloads).toBe(2)
          const statuses = (yield* sql<{ status: string }>`
            SELECT public_payload->>'status' AS status FROM task_events WHERE task_id = ${task.taskId}
            ORDER BY task_version`).map((r) => r.status)
          expect(statuses).toContain("output_at_risk")
          const keys = simulator.jobs().map((j) => j.clientKey)
          expect(keys.length).toBe(1)
          expect(simulator.submissions(keys[0]!)).toBe(1)
        } finally {
          b.child.kill("SIGTERM")
          yield* Effect.promise(() => withTimeout(b.exited, 20_000, "runner B shutdown")).pipe(Effect.ignore)
        }
      }))
  })
})
