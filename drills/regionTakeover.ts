/**
 * region-takeover (seed §19.4.4): the old region goes READ_ONLY, the operator bumps the write epoch to the new region,
 * the new region's runner takes over the tasks, and the old side's late writes are refused: after the bump no task
 * row changes under the old epoch. The database stands for the replicated one both regions see.
 */
import { checkInvariants, describeInvariants, violations } from "./invariants.js"
import type { DrillRow } from "./report.js"
import { log, openStage, waitFor } from "./stage.js"

const TASKS = Number(process.env.DRILL_TASKS ?? 30)

export const regionTakeover = async (): Promise<DrillRow> => {
  const stage = await openStage({ name: "region-takeover", runners: 1, env: { REGION: "local" } })
  try {
    const [oldSide] = stage.runners as [typeof stage.runners[0]]
    await stage.faults({ jobDurationMs: 20_000, queuedShare: 0.1 })
    const ids = await stage.workload(TASKS)
    const started = performance.now()
    const put = await stage.adminCall("/admin/mode", {
      method: "PUT",
      body: JSON.stringify({ mode: "READ_ONLY", reason: "drill: region takeover" })
    })
    if (put.status !== 200) throw new Error(`PUT /admin/mode: ${put.status} ${JSON.stringify(put.body)}`)
    const refusedWhileReadOnly = await stage.createTask("runway", oldSide).then(() => false, () => true)
    const bump = await stage.adminCall("/admin/epoch/bump", {
      method: "POST",
      body: JSON.stringify({ region: "west", reason: "drill: region takeover" })
    })
    if (bump.status !== 200) throw new Error(`POST /admin/epoch/bump: ${bump.status} ${JSON.stringify(bump.body)}`)
    const epoch = (bump.body as { write_epoch: number }).write_epoch
    const bumpedAt = (await stage.db.query(`SELECT now() AS t`)).rows[0].t as Date
    log(`READ_ONLY, epoch ${epoch} for region west; starting the new side`)
    // the new region's runner (same database: the replica it was promoted to in a real takeover)
    const newSide = await stage.addRunner("west", { REGION: "west" })
    // the old side's own writes from here on are fenced; it is taken down, as the old region is, once the new side
    // holds shards of its own
    await waitFor(
      "the new side holds shards",
      async () => ((await stage.shards(newSide)).get(`127.0.0.1:${newSide.runnerPort}`) ?? 0) > 0,
      120_000
    )
    await stage.stop(oldSide, "SIGTERM")
    await stage.adminCall("/admin/mode", {
      method: "PUT",
      body: JSON.stringify({ mode: "NORMAL", reason: "drill: the new region writes" })
    }, newSide)
    const fresh = await stage.createTask("runway", newSide)
    const rto = (performance.now() - started) / 1000
    const all = [...ids, fresh]
    await waitFor(
      "every task terminal on the new side",
      async () => (await stage.terminalCount(all)) === all.length,
      300_000
    )
    const lateOld = Number(
      (await stage.db.query(
        `SELECT count(*) FROM generation_tasks WHERE updated_at > $1 AND write_epoch < $2`,
        [bumpedAt, epoch]
      )).rows[0].count
    )
    const inv = await checkInvariants(stage.db, stage.sim, all)
    const problems = [
      ...(violations(inv) > 0 ? [describeInvariants(inv)] : []),
      ...(lateOld > 0 ? [`${lateOld} task rows written under the old epoch after the bump`] : []),
      ...(refusedWhileReadOnly ? [] : ["a task was admitted in READ_ONLY"])
    ]
    return {
      drill: "region-takeover",
      fault: `READ_ONLY, epoch bump to region west (epoch ${epoch}), new-region runner started, old one stopped`,
      behaviour:
        "admissions refused in READ_ONLY; no task write under the old epoch after the bump; new side finishes every task",
      rtoS: rto,
      rtoMeasures: "READ_ONLY → the new side admits a task",
      rpo: `0 commits lost (${inv.eventGaps} event gaps), ${lateOld} late old-epoch writes landed`,
      figures: describeInvariants(inv),
      manualSteps: "READ_ONLY, epoch bump, start the new side, NORMAL (ops mode / ops epoch)",
      passed: problems.length === 0,
      problems
    }
  } finally {
    await stage.close()
  }
}
