/**
 * runner-loss (seed §19.10.1 "instance exit"): a runner holding half the shards is killed with SIGKILL while its
 * tasks are in flight. The survivor takes every shard, the tasks resume from PostgreSQL (no job submitted twice, no
 * acknowledged task or commit lost), admissions keep working during the loss; the runner restarts and gets shards back.
 */
import { checkInvariants, describeInvariants, violations } from "./invariants.js"
import type { DrillRow } from "./report.js"
import { log, openStage, waitFor } from "./stage.js"

const TASKS = Number(process.env.DRILL_TASKS ?? 60)

export const runnerLoss = async (): Promise<DrillRow> => {
  const stage = await openStage({ name: "runner-loss" })
  try {
    const [a, b] = stage.runners as [typeof stage.runners[0], typeof stage.runners[0]]
    const addressOf = (r: typeof a) => `127.0.0.1:${r.runnerPort}`
    await stage.faults({ jobDurationMs: 20_000, queuedShare: 0.1 })
    log("stage up")
    await waitFor("both runners hold shards", async () => {
      const s = await stage.shards()
      return (s.get(addressOf(a)) ?? 0) > 0 && (s.get(addressOf(b)) ?? 0) > 0 && !s.has(null)
    }, 120_000)
    log("shards spread over both runners")
    const ids = await stage.workload(TASKS)
    log(`${ids.length} tasks created`)
    await waitFor("every task submitted", async () =>
      Number(
        (await stage.db.query(
          `SELECT count(*) FROM task_attempts WHERE task_id = ANY($1::uuid[]) AND provider_task_id IS NOT NULL`,
          [ids]
        )).rows[0].count
      ) === ids.length, 120_000)
    const onB = (await stage.shards()).get(addressOf(b)) ?? 0
    log(`${ids.length} tasks in flight; runner B holds ${onB} shards; SIGKILL B`)

    await stage.stop(b, "SIGKILL")
    // admissions go on through the survivor while B is gone
    const during: Array<string> = []
    let admitting = true
    const admissions = (async () => {
      while (admitting) {
        during.push(await stage.createTask("runway", a))
      }
    })()
    const rto = await waitFor("the survivor holds every shard", async () => {
      const s = await stage.shards(a)
      return s.get(addressOf(a)) === 300
    }, 120_000)
    admitting = false
    await admissions
    log(
      `survivor holds all 300 shards ${
        (rto / 1000).toFixed(1)
      } s after the kill; ${during.length} tasks admitted meanwhile`
    )

    await stage.start(b)
    const back = await waitFor(
      "the restarted runner gets shards back",
      async () => ((await stage.shards(a)).get(addressOf(b)) ?? 0) > 0,
      120_000
    )
    const all = [...ids, ...during]
    const converged = await waitFor(
      "every task terminal",
      async () => (await stage.terminalCount(all)) === all.length,
      180_000
    )
    const inv = await checkInvariants(stage.db, stage.sim, all)
    const problems = [...(violations(inv) > 0 ? [describeInvariants(inv)] : [])]
    return {
      drill: "runner-loss",
      fault: `SIGKILL of the runner holding ${onB} of 300 shards, ${ids.length} tasks in flight; restarted after`,
      behaviour: "survivor takes every shard; tasks resume from PostgreSQL; admissions continue; no resubmission",
      rtoS: rto / 1000,
      rtoMeasures: "kill → all 300 shards held by the survivor",
      rpo: `0 acknowledged tasks lost (${
        all.length - inv.stuck
      } of ${all.length} terminal), ${inv.eventGaps} commit gaps`,
      figures: `${describeInvariants(inv)}; ${during.length} admitted during the loss; shards back to the restarted ` +
        `runner ${(back / 1000).toFixed(1)} s after its start; all terminal ${(converged / 1000).toFixed(1)} s after`,
      manualSteps: "none (restart by the supervisor)",
      passed: problems.length === 0,
      problems
    }
  } finally {
    await stage.close()
  }
}
