/**
 * pg-failover (seed §19.10.1 "database primary failure", §19.4.4 for the mode): a PostgreSQL primary and its streaming
 * replica, clusters of the drill's own (the machine's PostgreSQL is left alone); the runners reach them through one
 * DATABASE_URL with both hosts (target_session_attrs=read-write). The operator goes RECONCILE_ONLY, the primary is
 * stopped, the replica promoted, and the operator goes back to NORMAL: the runners must come back on the promoted
 * server with the same processes (no restart, no new setting), lose no acknowledged commit, and finish every task.
 */
import pg from "pg"
import { checkInvariants, describeInvariants, violations } from "./invariants.js"
import type { DrillRow } from "./report.js"
import { ownPostgres, ownReplica } from "./services.js"
import { log, openStage, request, waitFor } from "./stage.js"

const TASKS = Number(process.env.DRILL_TASKS ?? 30)
/** fast: a planned switchover (the primary sends its last WAL first); immediate: a crash. */
const STOP_MODE = process.env.DRILL_PG_STOP === "immediate" ? "immediate" : "fast"

export const pgFailover = async (): Promise<DrillRow> => {
  const primary = await ownPostgres("drill-pgfo-primary")
  const replica = await ownReplica("drill-pgfo-replica", primary).catch((e) => {
    primary.remove()
    throw e
  })
  const hosts = `127.0.0.1:${primary.port},127.0.0.1:${replica.port}`
  const stage = await openStage({
    name: "pg-failover",
    runners: 2,
    adminUrl: primary.adminUrl,
    runnerDatabaseUrl: (database) => `postgres://postgres@${hosts}/${database}?target_session_attrs=read-write`
  }).catch((e) => {
    primary.remove()
    replica.remove()
    throw e
  })
  // the drill's own view of the promoted server (stage.db stays on the old primary)
  const promoted = new pg.Pool({ connectionString: `${replica.adminUrl.replace(/\/postgres$/, "")}/${stage.database}` })
  promoted.on("error", () => undefined)
  try {
    const [a] = stage.runners as [typeof stage.runners[0]]
    await stage.faults({ jobDurationMs: 20_000, queuedShare: 0.1, progressEveryMs: 2_000 })
    const ids = await stage.workload(TASKS)
    await waitFor(
      "tasks progressing",
      async () => Number((await stage.db.query(`SELECT count(*) FROM task_events`)).rows[0].count) >= ids.length * 2,
      60_000
    )

    const reconcile = await stage.adminCall("/admin/mode", {
      method: "PUT",
      body: JSON.stringify({ mode: "RECONCILE_ONLY", reason: "drill: PostgreSQL failover" })
    })
    if (reconcile.status !== 200) {
      throw new Error(`PUT /admin/mode: ${reconcile.status} ${JSON.stringify(reconcile.body)}`)
    }
    const refused = await request(`${a.url}/v1/projects/${stage.project}/tasks`, {
      method: "POST",
      token: stage.token,
      headers: { "idempotency-key": crypto.randomUUID() },
      body: JSON.stringify({ provider: "runway", model: "gen4.5", prompt: "a drill", duration_seconds: 5 })
    })
    // acknowledged commits: every task event the primary had committed when the drill last looked before the stop
    const acknowledged = (await stage.db.query(`SELECT task_id::text AS t, task_version AS version FROM task_events`))
      .rows
      .map((r) => `${r.t}/${r.version}`)
    log(`RECONCILE_ONLY; ${acknowledged.length} events acknowledged; stopping the primary (${STOP_MODE})`)
    const stoppedAt = performance.now()
    primary.stop(STOP_MODE)
    replica.promote()
    log(`replica promoted ${((performance.now() - stoppedAt) / 1000).toFixed(1)} s after the stop`)

    const readyMs = await waitFor(
      "a runner answers ready",
      async () => (await request(`${a.url}/readyz`)).status === 200,
      120_000
    ).then(() => performance.now() - stoppedAt)
    await waitFor("NORMAL again", async () =>
      (await stage.adminCall("/admin/mode", {
        method: "PUT",
        body: JSON.stringify({ mode: "NORMAL", reason: "drill: the promoted server writes" })
      })).status === 200, 120_000)
    let fresh = ""
    await waitFor("a runner admits a task", async () => {
      fresh = await stage.createTask("runway", a)
      return true
    }, 180_000)
    const rto = (performance.now() - stoppedAt) / 1000
    log(`a task admitted ${rto.toFixed(1)} s after the stop (ready after ${(readyMs / 1000).toFixed(1)} s)`)

    const all = [...ids, fresh]
    const terminal = async () =>
      Number(
        (await promoted.query(
          `SELECT count(*) FROM generation_tasks WHERE id = ANY($1::uuid[]) AND terminal_at IS NOT NULL`,
          [all]
        )).rows[0].count
      )
    await waitFor("every task terminal on the promoted server", async () => (await terminal()) === all.length, 300_000)
    // the wake loops' LISTEN on the promoted server, woken by NOTIFYs of the drill's own (a wake with nothing to
    // drain): the inbox processor on every runner; the outbox relay (a singleton) on at least one (a runner it left
    // keeps its last value)
    const gauges = async (loop: string) =>
      (await Promise.all(stage.runners.map((r) => stage.metricValues(r, "wake_loop_listening", [`loop="${loop}"`]))))
        .map((v) => v[0] ?? 0)
    let listenFigures = ""
    const listening = await waitFor("the wake loops LISTEN again", async () => {
      await promoted.query(`SELECT pg_notify('provider_inbox', '0'), pg_notify('outbox_events', 'outbox')`)
      const [inbox, outbox] = [await gauges("inbox processor"), await gauges("outbox relay")]
      listenFigures = `inbox ${inbox.join("/")}, outbox relay ${outbox.join("/")}`
      return inbox.every((v) => v === 1) && outbox.some((v) => v === 1)
    }, 120_000).then(() => true, () => false)
    const present = new Set(
      (await promoted.query(`SELECT task_id::text AS t, task_version AS version FROM task_events`)).rows.map((r) =>
        `${r.t}/${r.version}`
      )
    )
    const lost = acknowledged.filter((k) => !present.has(k)).length
    const switches = (await Promise.all(stage.runners.map((r) => stage.metric(r, "pg_host_switches_total"))))
      .reduce((s, n) => s + n, 0)
    const inv = await checkInvariants(promoted, stage.sim, all)
    const problems = [
      ...(violations(inv) > 0 ? [describeInvariants(inv)] : []),
      ...(listening ? [] : ["a wake loop's LISTEN was not proven again on the promoted server"]),
      ...(refused.status === 201 ? ["a task was admitted in RECONCILE_ONLY"] : []),
      ...(lost > 0 ? [`${lost} acknowledged commits missing on the promoted server`] : []),
      ...(switches < stage.runners.length
        ? [`pg_host_switches_total ${switches} over ${stage.runners.length} runners`]
        : [])
    ]
    return {
      drill: "pg-failover",
      fault: `primary stopped (${STOP_MODE}) and its streaming replica promoted while ${ids.length} tasks ran`,
      behaviour:
        "runners reconnect through the two-host DATABASE_URL (read-write) without restart; RECONCILE_ONLY around it",
      rtoS: rto,
      rtoMeasures: `primary stopped → a runner admits a task (ready after ${(readyMs / 1000).toFixed(1)} s)`,
      rpo: `${lost} of ${acknowledged.length} acknowledged commits (task events) missing on the promoted server`,
      figures: `admission in RECONCILE_ONLY: ${refused.status}; pg_host_switches_total ${switches} over ` +
        `${stage.runners.length} runners; wake loops LISTEN again: ${listening ? "yes" : "no"} (${listenFigures}); ` +
        describeInvariants(inv),
      manualSteps: "RECONCILE_ONLY, promote the replica (pg_ctl promote), NORMAL (ops mode)",
      passed: problems.length === 0,
      problems
    }
  } finally {
    await promoted.end().catch(() => undefined)
    await stage.close()
    primary.remove()
    replica.remove()
  }
}
