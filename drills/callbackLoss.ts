/**
 * callback-loss (seed §19.10.1 "callbacks lost"): the providers' webhooks stop arriving (the simulator drops every
 * delivery). Polling compensates: every task still reaches the provider's outcome, and poll_fallback_ratio rises from
 * its level with callbacks flowing. RTO here is how late a task learns its job ended without a callback.
 */
import { percentile } from "../bench/support.js"
import { checkInvariants, describeInvariants, violations } from "./invariants.js"
import type { DrillRow } from "./report.js"
import { log, openStage, type Stage, waitFor } from "./stage.js"

const TASKS = Number(process.env.DRILL_TASKS ?? 30)
const JOB_MS = 8_000

/** Seconds from each task's job end at the provider (submitted + the job's length) to its terminal commit. */
const detectionSeconds = async (stage: Stage, ids: ReadonlyArray<string>) =>
  (await stage.db.query(
    `SELECT extract(epoch FROM t.terminal_at - a.submit_started_at)::float - $2::float AS s
     FROM generation_tasks t JOIN task_attempts a ON a.id = t.current_attempt_id WHERE t.id = ANY($1::uuid[])`,
    [ids, JOB_MS / 1000]
  )).rows.map((r) => Number(r.s))

export const callbackLoss = async (): Promise<DrillRow> => {
  const stage = await openStage({ name: "callback-loss", runners: 1 })
  try {
    const [a] = stage.runners
    const ratio = () => stage.metric(a!, "poll_fallback_ratio")
    await stage.faults({ jobDurationMs: JOB_MS, queuedShare: 0.1 })
    // with callbacks: the webhook providers' tasks end by their callbacks
    const before = await stage.workload(TASKS, ["openai", "replicate"])
    await waitFor(
      "every task terminal with callbacks",
      async () => (await stage.terminalCount(before)) === before.length,
      180_000
    )
    const ratioBefore = await ratio()
    const withCallbacks = await detectionSeconds(stage, before)
    log(`with callbacks: poll_fallback_ratio ${ratioBefore.toFixed(2)}`)

    await stage.faults({ dropWebhooks: 1 })
    const lost = await stage.workload(TASKS, ["openai", "replicate"])
    const converged = await waitFor(
      "every task terminal without callbacks",
      async () => (await stage.terminalCount(lost)) === lost.length,
      300_000
    )
    let ratioAfter = 0
    await waitFor("poll_fallback_ratio rises", async () => (ratioAfter = await ratio()) > ratioBefore, 30_000)
      .catch(() => undefined)
    const withoutCallbacks = await detectionSeconds(stage, lost)
    log(
      `without callbacks: poll_fallback_ratio ${ratioAfter.toFixed(2)}, all terminal in ${
        (converged / 1000).toFixed(0)
      } s`
    )
    await stage.faults({ dropWebhooks: 0 })

    const inv = await checkInvariants(stage.db, stage.sim, [...before, ...lost])
    const problems = [
      ...(violations(inv) > 0 ? [describeInvariants(inv)] : []),
      ...(ratioAfter > ratioBefore ? [] : [`poll_fallback_ratio did not rise (${ratioBefore} → ${ratioAfter})`])
    ]
    const s = (xs: Array<number>) => `p50 ${percentile(xs, 50).toFixed(1)} s, max ${Math.max(...xs).toFixed(1)} s`
    return {
      drill: "callback-loss",
      fault: `every webhook dropped (OpenAI, Replicate), ${lost.length} tasks`,
      behaviour: "polling compensates: every task reaches the provider's outcome; poll_fallback_ratio rises",
      rtoS: Math.max(...withoutCallbacks),
      rtoMeasures: "job end → terminal commit without callbacks, worst task",
      rpo: `0 tasks lost (${lost.length - inv.stuck} of ${lost.length} terminal)`,
      figures: `job end → terminal: with callbacks ${s(withCallbacks)}, without ${s(withoutCallbacks)}; ` +
        `poll_fallback_ratio ${ratioBefore.toFixed(2)} → ${ratioAfter.toFixed(2)}; ${describeInvariants(inv)}`,
      manualSteps: "none",
      passed: problems.length === 0,
      problems
    }
  } finally {
    await stage.close()
  }
}
