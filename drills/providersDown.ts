/**
 * providers-down (seed §19.10.1 "all providers down"): every provider answers 5xx. Each provider/model breaker opens
 * (no task fails for it, none is submitted twice), the operator pauses new submissions (QUEUE_ONLY) while tasks are
 * still admitted and kept; the providers recover, the operator goes back to NORMAL, the breakers half-open and close,
 * and the queued tasks are submitted in admission order and end.
 */
import { percentile } from "../bench/support.js"
import { checkInvariants, describeInvariants, violations } from "./invariants.js"
import type { DrillRow } from "./report.js"
import { log, openStage, waitFor } from "./stage.js"

const TASKS = Number(process.env.DRILL_TASKS ?? 30)

export const providersDown = async (): Promise<DrillRow> => {
  // a breaker trips on 5 calls here (20 by default) so that a drill of 30 tasks sees it
  const stage = await openStage({
    name: "providers-down",
    runners: 1,
    env: { BREAKER_MIN_CALLS: "5", BREAKER_OPEN_FOR: "5 seconds", BREAKER_OPEN_MAX: "10 seconds" }
  })
  try {
    const [a] = stage.runners
    // the routes whose breaker is open, as the operator sees them (GET /admin/breakers)
    const open = async () =>
      ((await stage.adminCall("/admin/breakers", {}, a)).body as { breakers: Array<{ state: string }> }).breakers
        .filter((b) => b.state === "open").length
    await stage.faults({ jobDurationMs: 5_000, queuedShare: 0.1, rate5xx: 1 })
    const before = await stage.workload(TASKS)
    await waitFor("a breaker opens", async () => (await open()) > 0, 120_000)
    log(`breakers open: ${await open()}`)
    const mode = await stage.adminCall("/admin/mode", {
      method: "PUT",
      body: JSON.stringify({ mode: "QUEUE_ONLY", reason: "drill: every provider is down" })
    })
    if (mode.status !== 200) throw new Error(`PUT /admin/mode: ${mode.status} ${JSON.stringify(mode.body)}`)
    const queued = await stage.workload(TASKS)
    const failedMeanwhile = Number(
      (await stage.db.query(
        `SELECT count(*) FROM generation_tasks WHERE terminal_at IS NOT NULL AND status <> 'ready'`
      )).rows[0].count
    )
    log(`${queued.length} tasks admitted in QUEUE_ONLY; ${failedMeanwhile} tasks ended other than ready so far`)

    await stage.faults({ rate5xx: 0 })
    const recoveredAt = performance.now()
    await stage.adminCall("/admin/mode", {
      method: "PUT",
      body: JSON.stringify({ mode: "NORMAL", reason: "drill: providers back" })
    })
    const all = [...before, ...queued]
    const converged = await waitFor(
      "every task terminal",
      async () => (await stage.terminalCount(all)) === all.length,
      300_000
    )
    await waitFor("every breaker closed", async () => (await open()) === 0, 60_000).catch(() => undefined)
    const stillOpen = await open()
    // fair: the tasks queued during the outage are submitted in about their admission order
    const order = (await stage.db.query(
      `SELECT t.id FROM generation_tasks t JOIN task_attempts a ON a.task_id = t.id
       WHERE t.id = ANY($1::uuid[]) AND a.attempt_no = 1 ORDER BY a.submit_started_at`,
      [queued]
    )).rows.map((r) => String(r.id))
    const rank = new Map(queued.map((id, i) => [id, i]))
    const displacement = order.map((id, i) => Math.abs((rank.get(id) ?? i) - i))
    const inv = await checkInvariants(stage.db, stage.sim, all)
    const problems = [
      ...(violations(inv) > 0 ? [describeInvariants(inv)] : []),
      ...(stillOpen > 0 ? [`${stillOpen} breakers still open after recovery`] : []),
      ...(failedMeanwhile > 0 ? [`${failedMeanwhile} tasks failed while the providers were down`] : [])
    ]
    return {
      drill: "providers-down",
      fault: "every provider answers 5xx; then QUEUE_ONLY; then providers back and NORMAL",
      behaviour:
        "breakers open, nothing fails or is submitted twice; queued tasks admitted and later submitted in order",
      rtoS: converged / 1000,
      rtoMeasures: "providers back → every task terminal",
      rpo: `0 tasks lost (${all.length - inv.stuck} of ${all.length} terminal)`,
      figures: `${describeInvariants(inv)}; submission order of the queued tasks vs admission: median displacement ${
        percentile(displacement, 50)
      }, max ${Math.max(0, ...displacement)} of ${queued.length}; recovered ${
        ((performance.now() - recoveredAt) / 1000).toFixed(0)
      } s`,
      manualSteps: "QUEUE_ONLY, then NORMAL (ops mode)",
      passed: problems.length === 0,
      problems
    }
  } finally {
    await stage.close()
  }
}
