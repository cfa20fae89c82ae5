/**
 * redis-failover (seed §19.10.1 "Redis unavailable"): the runners reach Redis through Sentinel (REDIS_SENTINELS);
 * the master is SIGKILLed while tasks change and a browser follows the project's stream. The Sentinels promote the
 * replica; quotas fall back to local buckets meanwhile (admissions go on), every runner's connections follow the new
 * master without a restart, and the stream misses nothing (the PostgreSQL tail fills what the bus lost).
 */
import { Effect, Exit, Scope } from "effect"
import { spawn } from "node:child_process"
import { MASTER_NAME, startSentinelSetWith } from "../test/support/sentinelSet.js"
import { checkInvariants, describeInvariants, violations } from "./invariants.js"
import type { DrillRow } from "./report.js"
import { follow, log, openStage, type Runner, type Stage, waitFor } from "./stage.js"

const TASKS = Number(process.env.DRILL_TASKS ?? 30)
/** Tasks admitted while the master is down and being replaced. */
const DURING = 6

interface Connection {
  readonly connection: string
  readonly status: string
  readonly master: string | null
}

/** Every Redis connection of `runner` is ready on `master` (GET /admin/redis). */
const onMaster = async (stage: Stage, runner: Runner, master: string) => {
  const res = await stage.adminCall("/admin/redis", {}, runner)
  const connections = (res.body as { connections: ReadonlyArray<Connection> }).connections
  return res.status === 200 && connections.length > 0 &&
    connections.every((c) => c.status === "ready" && c.master === master)
}

export const redisFailover = async (): Promise<DrillRow> => {
  const scope = Effect.runSync(Scope.make())
  // a master, a replica and three Sentinels of the drill's own (test/support/sentinelSet.ts), removed at the end
  const set = await Effect.runPromise(Scope.extend(
    startSentinelSetWith((command, args) => {
      const child = spawn(command, args, { stdio: "ignore" })
      return { child, exited: new Promise((resolve) => child.once("exit", resolve)) }
    }),
    scope
  ))
  let stage: Stage | undefined
  try {
    const s = stage = await openStage({
      name: "redis-failover",
      runners: 2,
      env: {
        REDIS_URL: "",
        REDIS_SENTINELS: set.sentinels.map((x) => `${x.host}:${x.port}`).join(","),
        REDIS_MASTER_NAME: MASTER_NAME
      }
    })
    const [a, b] = s.runners as [Runner, Runner]
    const first = `127.0.0.1:${await Effect.runPromise(set.master)}`
    await waitFor(
      "both runners on the first master",
      async () => (await onMaster(s, a, first)) && (await onMaster(s, b, first)),
      60_000
    )
    // the browser is on B, tasks are admitted on both: events cross the bus to reach it
    const stream = follow(`${b.url}/v1/projects/${s.project}/events`, s.token)
    try {
      await s.faults({ jobDurationMs: 20_000, queuedShare: 0.1, progressEveryMs: 1_000 })
      const ids = await s.workload(TASKS)
      log(`${ids.length} tasks; SIGKILL of the Redis master ${first}`)
      const killedAt = performance.now()
      // admissions during the switch: quotas answer from local buckets meanwhile
      const during = Promise.all(Array.from({ length: DURING }, (_, i) => s.createTask("openai", i % 2 ? a : b)))
      const { to } = await Effect.runPromise(set.killMaster)
      const promoted = performance.now() - killedAt
      const next = `127.0.0.1:${to}`
      log(`the Sentinels name ${next} after ${(promoted / 1000).toFixed(1)} s`)
      await waitFor(
        "every runner's connections on the new master",
        async () => (await onMaster(s, a, next)) && (await onMaster(s, b, next)),
        120_000
      )
      const rto = (performance.now() - killedAt) / 1000
      log(`both runners on ${next} ${rto.toFixed(1)} s after the kill`)
      const admittedDuring = await during
      const all = [...ids, ...admittedDuring]
      await waitFor("every task terminal", async () => (await s.terminalCount(all)) === all.length, 300_000)
      const { stored, missing, duplicates } = await s.streamCheck(stream)
      const inv = await checkInvariants(s.db, s.sim, all)
      const problems = [
        ...(violations(inv) > 0 ? [describeInvariants(inv)] : []),
        ...(missing > 0 ? [`${missing} stored events never reached the SSE client`] : [])
      ]
      return {
        drill: "redis-failover",
        fault: `Redis master SIGKILLed (Sentinel, quorum 2 of 3) while ${ids.length} tasks changed`,
        behaviour:
          "Sentinel promotes the replica; admissions go on (local quotas); runners follow without a restart; " +
          "the stream misses nothing",
        rtoS: rto,
        rtoMeasures: `kill → every connection of both runners ready on the new master (Sentinels agreed after ${
          (promoted / 1000).toFixed(1)
        } s)`,
        rpo: `0 events lost: ${stored} stored, ${missing} missing at the SSE client (${duplicates} repeated); ` +
          "quota counters restart on the new master (Redis keeps no facts)",
        figures: `${admittedDuring.length} of ${DURING} admissions during the switch answered 201; ` +
          describeInvariants(inv),
        manualSteps: "none (Sentinel promotes; the runners follow)",
        passed: problems.length === 0,
        problems
      }
    } finally {
      stream.close()
    }
  } finally {
    await stage?.close()
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}
