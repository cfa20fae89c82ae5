/**
 * object-store-down (seed §19.10.1 "object store unavailable"): the runners keep outputs in an S3-compatible store
 * (s3rver); it goes away while the provider finishes jobs. Their fetches fail, the tasks wait in output_at_risk, and
 * once the store is back (same port, same data) every output is stored before its URL's deadline: no task ends
 * output_unavailable, none is charged twice, and no job is submitted again.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { freePort } from "../bench/support.js"
import { runS3rver, type S3rverInstance, s3rverSettings } from "../test/support/s3.js"
import { checkInvariants, describeInvariants, violations } from "./invariants.js"
import type { DrillRow } from "./report.js"
import { log, openStage, type Stage, waitFor } from "./stage.js"

const TASKS = Number(process.env.DRILL_TASKS ?? 20)
/** How long the store stays down once a task is at risk. */
const DOWN_MS = Number(process.env.DRILL_OUTAGE_S ?? 20) * 1000
const BUCKET = "outputs"

const statusCounts = async (stage: Stage, ids: ReadonlyArray<string>) => {
  const rows = (await stage.db.query(
    `SELECT status, error_code, count(*)::int AS n FROM generation_tasks WHERE id = ANY($1::uuid[])
     GROUP BY status, error_code`,
    [ids]
  )).rows as Array<{ status: string; error_code: string | null; n: number }>
  return rows
}

export const objectStoreDown = async (): Promise<DrillRow> => {
  const port = await freePort()
  const directory = fs.mkdtempSync(path.join(os.tmpdir(), "drill-s3-"))
  let store: S3rverInstance | undefined = await runS3rver(port, directory, BUCKET)
  const stage = await openStage({
    name: "object-store-down",
    runners: 2,
    env: { ...s3rverSettings(`http://127.0.0.1:${port}`, BUCKET), OBJECT_STORE_TIMEOUT: "3 seconds" }
  })
  try {
    await stage.faults({ jobDurationMs: 8_000, queuedShare: 0, outcomes: { succeeded: 1, failed: 0, canceled: 0 } })
    const ids = await stage.workload(TASKS)
    await store.close()
    store = undefined
    const downAt = performance.now()
    log(`${ids.length} tasks; the object store is down`)
    const risky = async () =>
      Number(
        (await stage.db.query(
          `SELECT count(*) FROM generation_tasks WHERE id = ANY($1::uuid[]) AND status = 'output_at_risk'`,
          [ids]
        )).rows[0].count
      )
    await waitFor("a task in output_at_risk", async () => (await risky()) > 0, 120_000)
    let peakAtRisk = 0
    while (performance.now() - downAt < DOWN_MS) {
      peakAtRisk = Math.max(peakAtRisk, await risky())
      await new Promise((r) => setTimeout(r, 1_000))
    }
    const during = await statusCounts(stage, ids)
    store = await runS3rver(port, directory, BUCKET)
    const upAt = performance.now()
    log(`the store is back after ${((upAt - downAt) / 1000).toFixed(0)} s (${peakAtRisk} tasks at risk at most)`)
    const recovered = await waitFor(
      "every task terminal",
      async () => (await stage.terminalCount(ids)) === ids.length,
      600_000
    )
    const after = await statusCounts(stage, ids)
    const lost = after.filter((r) => r.error_code === "output_unavailable").reduce((n, r) => n + r.n, 0)
    const ready = after.filter((r) => r.status === "ready").reduce((n, r) => n + r.n, 0)
    const inv = await checkInvariants(stage.db, stage.sim, ids)
    const describe = (rows: ReadonlyArray<{ status: string; n: number }>) =>
      rows.map((r) => `${r.n} ${r.status}`).join(", ")
    const problems = [
      ...(violations(inv) > 0 ? [describeInvariants(inv)] : []),
      ...(lost > 0 ? [`${lost} tasks lost their output (output_unavailable)`] : []),
      ...(ready < ids.length ? [`only ${ready} of ${ids.length} tasks ready: ${describe(after)}`] : []),
      ...(peakAtRisk === 0 ? ["no task was at risk: the drill tested nothing"] : [])
    ]
    return {
      drill: "object-store-down",
      fault: `S3 store (s3rver) stopped for ${((upAt - downAt) / 1000).toFixed(0)} s while ${ids.length} jobs finished`,
      behaviour: "fetches fail → output_at_risk; after the store returns every output is stored before its deadline",
      rtoS: recovered / 1000,
      rtoMeasures: "store back → every task ready, its output stored",
      rpo: `0 outputs lost (${lost} output_unavailable)`,
      figures: `at most ${peakAtRisk} tasks at risk; at the store's return: ${describe(during)}; ` +
        describeInvariants(inv),
      manualSteps: "restore the store",
      passed: problems.length === 0,
      problems
    }
  } finally {
    await stage.close()
    await store?.close().catch(() => undefined)
    fs.rmSync(directory, { recursive: true, force: true })
  }
}
