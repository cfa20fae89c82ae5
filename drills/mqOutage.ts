/**
 * mq-outage (seed §19.10.1 "MQ unavailable"): the RocketMQ broker (NameServer + Proxy) is stopped while tasks change.
 * Commits go on (PostgreSQL holds every fact), the outbox backs up, and once the broker is back the relay drains it:
 * nothing lost, each event delivered. A browser's SSE stream sees every committed event, in order, without a gap.
 */
import { spawnSync } from "node:child_process"
import { checkInvariants, describeInvariants, violations } from "./invariants.js"
import type { DrillRow } from "./report.js"
import { follow, log, openStage, type Stage, waitFor } from "./stage.js"

const TASKS = Number(process.env.DRILL_TASKS ?? 30)
const OUTAGE_MS = Number(process.env.DRILL_OUTAGE_S ?? 20) * 1000

const rocketmq = (command: "up" | "down") => {
  const r = spawnSync("scripts/rocketmq.sh", [command], { stdio: ["ignore", "ignore", "inherit"] })
  if (r.status !== 0) throw new Error(`scripts/rocketmq.sh ${command} exited ${r.status}`)
}

const backlog = async (stage: Stage) =>
  Number((await stage.db.query(`SELECT count(*) FROM outbox_events WHERE published_at IS NULL`)).rows[0].count)

export const mqOutage = async (): Promise<DrillRow> => {
  if (process.env.ROCKETMQ_ENDPOINTS === undefined || process.env.ROCKETMQ_ENDPOINTS === "") {
    throw new Error("mq-outage needs ROCKETMQ_ENDPOINTS (scripts/rocketmq.sh up)")
  }
  const stage = await openStage({ name: "mq-outage", runners: 1, rocketmq: true })
  const stream = follow(`${stage.runners[0]!.url}/v1/projects/${stage.project}/events`, stage.token)
  try {
    await stage.faults({ jobDurationMs: OUTAGE_MS + 10_000, queuedShare: 0.1, progressEveryMs: 1_000 })
    const ids = await stage.workload(TASKS, ["openai", "replicate"])
    log(`${ids.length} tasks; stopping RocketMQ for ${OUTAGE_MS / 1000} s`)
    rocketmq("down")
    const downAt = performance.now()
    let peak = 0
    while (performance.now() - downAt < OUTAGE_MS) {
      peak = Math.max(peak, await backlog(stage))
      await new Promise((r) => setTimeout(r, 1_000))
    }
    const committedDuring = peak
    log(`outbox backlog ${peak} after ${OUTAGE_MS / 1000} s; starting RocketMQ`)
    rocketmq("up")
    const upAt = performance.now()
    const drained = await waitFor("the outbox drained", async () => {
      const n = await backlog(stage)
      peak = Math.max(peak, n)
      return n === 0
    }, 300_000)
    log(`outbox drained ${(drained / 1000).toFixed(1)} s after the broker answered again (peak backlog ${peak})`)
    await waitFor("every task terminal", async () => (await stage.terminalCount(ids)) === ids.length, 300_000)
    await waitFor("the outbox drained again", async () => (await backlog(stage)) === 0, 120_000)
    const { stored, missing, duplicates } = await stage.streamCheck(stream)
    const inv = await checkInvariants(stage.db, stage.sim, ids)
    const problems = [
      ...(violations(inv) > 0 ? [describeInvariants(inv)] : []),
      ...(missing > 0 ? [`${missing} stored events never reached the SSE client`] : []),
      ...(committedDuring === 0 ? ["nothing was committed during the outage: the drill tested nothing"] : [])
    ]
    return {
      drill: "mq-outage",
      fault: `RocketMQ stopped for ${OUTAGE_MS / 1000} s while ${ids.length} tasks changed`,
      behaviour: "commits go on; the outbox backs up and drains after; an SSE client misses nothing",
      rtoS: drained / 1000,
      rtoMeasures: "broker started again → outbox backlog 0 (drain time)",
      rpo: `0 events lost: ${stored} stored, ${missing} missing at the SSE client (${duplicates} repeated)`,
      figures:
        `outbox backlog peak ${peak} events; broker restart took ${
          ((upAt - downAt - OUTAGE_MS) / 1000).toFixed(0)
        } s; ` +
        describeInvariants(inv),
      manualSteps: "restart the broker",
      passed: problems.length === 0,
      problems
    }
  } finally {
    stream.close()
    await stage.close()
  }
}
