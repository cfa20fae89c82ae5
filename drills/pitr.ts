/**
 * pitr (seed §19.17 "restore to a point in time"): a primary of the drill's own archives its WAL; after a base backup
 * and a workload, a restore point is marked (with every task, event and ledger row committed before it recorded),
 * more work commits, and the backup plus the archive are restored up to the point into a new, isolated cluster.
 * There: everything committed before the point, nothing after it, the ledger balanced, each stream gap-free. Then an
 * operator gives the restored streams a new epoch (POST /admin/streams/new-epoch) and a runner on the restored
 * database must answer a browser resuming with a cursor of the lost timeline with a reset (foreign_epoch).
 */
import { Effect } from "effect"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import pg from "pg"
import { TokenSigner } from "../src/http/Auth.js"
import { eventGaps, ledgerDiffs, openLedgerDiffs } from "./invariants.js"
import type { DrillRow } from "./report.js"
import { baseBackup, ownPostgres, restoredPostgres, walArchive } from "./services.js"
import { AUTH_SECRET, follow, log, openStage, type Stage, waitFor } from "./stage.js"

const TASKS = Number(process.env.DRILL_TASKS ?? 20)
const POINT = "drill"

/** An operator token for the ops CLI (the stage's runners share AUTH_SECRET). */
const operatorToken = () => {
  process.env.AUTH_SECRET = AUTH_SECRET
  return Effect.runPromise(
    Effect.flatMap(TokenSigner, (s) => s.signOperator("drill-pitr")).pipe(Effect.provide(TokenSigner.Default))
  )
}

type Rows = ReadonlyArray<Record<string, unknown>>
const keysOf = (rows: Rows) => new Set(rows.map((r) => Object.values(r).map(String).join("/")))
const minus = (a: Set<string>, b: Set<string>) => [...a].filter((k) => !b.has(k)).length

/** What a database holds of the stage's project: its events, its tasks at their versions, its ledger rows. */
const snapshot = async (db: pg.Pool | pg.PoolClient, project: string) => {
  const events = (await db.query(
    `SELECT event_id, cursor_seq::text FROM task_events WHERE project_id = $1`,
    [project]
  )).rows as Rows
  const tasks = (await db.query(
    `SELECT id, version::text FROM generation_tasks WHERE project_id = $1`,
    [project]
  )).rows as Rows
  const ledger = (await db.query(
    `SELECT l.task_id, l.attempt_id, l.ledger_type, l.amount::text FROM credit_ledger l
     JOIN generation_tasks t ON t.id = l.task_id WHERE t.project_id = $1`,
    [project]
  )).rows as Rows
  const [head] = (await db.query(
    `SELECT stream_epoch::text AS epoch, last_seq::text AS seq FROM projects WHERE project_id = $1`,
    [project]
  )).rows as Array<{ epoch: string; seq: string }>
  return {
    events: keysOf(events),
    tasks: keysOf(tasks),
    taskIds: tasks.map((t) => String(t.id)),
    ledger: keysOf(ledger),
    epoch: Number(head!.epoch),
    lastSeq: Number(head!.seq)
  }
}
type Snapshot = Awaited<ReturnType<typeof snapshot>>

/**
 * Marks the restore point while the project's stream row is held: no task change of the project commits meanwhile
 * (each bumps that row), so what is read here is exactly what committed before the point's WAL record.
 */
const markPoint = async (stage: Stage) => {
  const client = await stage.db.connect()
  try {
    await client.query("BEGIN")
    await client.query(`SELECT 1 FROM projects WHERE project_id = $1 FOR UPDATE`, [stage.project])
    const [{ lsn }] = (await client.query(`SELECT pg_create_restore_point($1)::text AS lsn`, [POINT])).rows
    const before = await snapshot(client, stage.project)
    await client.query("COMMIT")
    return { lsn: String(lsn), before }
  } catch (e) {
    await client.query("ROLLBACK").catch(() => undefined)
    throw e
  } finally {
    client.release()
  }
}

const compare = (before: Snapshot, after: Snapshot, restored: Snapshot) => ({
  missing: minus(before.events, restored.events) + minus(before.tasks, restored.tasks) +
    minus(before.ledger, restored.ledger),
  // rows of the restored database that were not there at the point: committed after it (or changed after it)
  extra: minus(restored.events, before.events) + minus(restored.tasks, before.tasks) +
    minus(restored.ledger, before.ledger),
  // how much the primary had committed after the point (what the restore must leave out)
  afterPoint: minus(after.events, before.events)
})

export const pitr = async (): Promise<DrillRow> => {
  const archive = walArchive("drill-pitr")
  const primary = await ownPostgres("drill-pitr-primary", archive.conf)
  let restored: Awaited<ReturnType<typeof restoredPostgres>> | undefined
  let backupDir: string | undefined
  const stage = await openStage({ name: "pitr", runners: 1, adminUrl: primary.adminUrl }).catch((e) => {
    primary.remove()
    archive.remove()
    throw e
  })
  const clients: Array<{ close: () => void }> = []
  let restoredDb: pg.Pool | undefined
  try {
    const [runner] = stage.runners as [Stage["runners"][0]]
    const eventsUrl = (r: { url: string }) => `${r.url}/v1/projects/${stage.project}/events`
    const browser = follow(eventsUrl(runner), stage.token)
    clients.push(browser)
    backupDir = baseBackup("drill-pitr", primary)
    log("base backup taken; workload, restore point, more workload")
    await stage.faults({ jobDurationMs: 15_000, queuedShare: 0.1, progressEveryMs: 1_000 })
    const first = await stage.workload(TASKS / 2)
    await waitFor(
      "events before the point",
      async () => (await snapshot(stage.db, stage.project)).lastSeq > TASKS,
      60_000
    )
    const { before, lsn } = await markPoint(stage)
    log(`restore point '${POINT}' at ${lsn}: ${before.events.size} events, ${before.tasks.size} tasks before it`)
    const second = await stage.workload(TASKS / 2)
    await waitFor(
      "events after the point",
      async () => (await snapshot(stage.db, stage.project)).lastSeq > before.lastSeq + TASKS,
      60_000
    )
    const held = await waitFor(
      "the browser got an event after the point",
      () => browser.frames.some((f) => f.id !== undefined && Number(f.id.split("-")[1]) > before.lastSeq),
      30_000
    ).then(() => browser.frames.filter((f) => f.event === "task.status").at(-1)!.id!)
    // a real restore starts with every runner stopped: nothing more may be written to the damaged database
    await stage.stop(runner, "SIGTERM")
    browser.close()
    const after = await snapshot(stage.db, stage.project)
    // the point's WAL segment is closed and archived: recovery reads the restore point record from the archive
    const [{ pointWal }] = (await stage.db.query(
      `SELECT pg_walfile_name($1::pg_lsn) AS "pointWal", pg_switch_wal()`,
      [lsn]
    )).rows
    await waitFor(`WAL ${pointWal} archived`, () => archive.has(String(pointWal)), 60_000)
    log(`primary: ${after.events.size} events, last seq ${after.lastSeq}; restore point in WAL ${pointWal}`)

    // the restore, into a new cluster on its own port
    const restoreStart = performance.now()
    restored = await restoredPostgres(backupDir, archive, POINT)
    const replayStart = performance.now()
    await restored.start()
    const restoredUrl = `postgres://postgres@127.0.0.1:${restored.port}/${stage.database}`
    restoredDb = new pg.Pool({ connectionString: restoredUrl, max: 3 })
    restoredDb.on("error", () => undefined)
    const db = restoredDb
    await waitFor("the restored cluster is promoted", async () => {
      const [{ r }] = (await db.query(`SELECT pg_is_in_recovery() AS r`)).rows
      return r === false
    }, 300_000)
    const replayS = (performance.now() - replayStart) / 1000
    await db.query(`CREATE TABLE drill_probe (x int); INSERT INTO drill_probe VALUES (1); DROP TABLE drill_probe`)
    const rtoS = (performance.now() - restoreStart) / 1000
    log(`restored cluster read-write ${rtoS.toFixed(1)} s after the restore started (replay ${replayS.toFixed(1)} s)`)

    const got = await snapshot(db, stage.project)
    const diff = compare(before, after, got)
    const ledger = (await ledgerDiffs(db, got.taskIds)) + (await openLedgerDiffs(db, got.taskIds))
    const gaps = await eventGaps(db, got.taskIds)
    // every project's stream (the stage's and any other): cursor_seq contiguous from retention's mark to last_seq
    const streams = (await db.query(
      `SELECT p.project_id, p.last_seq::int AS last, p.retained_seq::int AS retained, count(e.*)::int AS n,
              min(e.cursor_seq)::int AS lo, max(e.cursor_seq)::int AS hi
       FROM projects p LEFT JOIN task_events e ON e.project_id = p.project_id
       GROUP BY p.project_id`
    )).rows as Array<{ project_id: string; last: number; retained: number; n: number; lo: number; hi: number }>
    const brokenStreams = streams.filter((p) =>
      p.n !== p.last - p.retained || (p.n > 0 && (p.lo !== p.retained + 1 || p.hi !== p.last))
    )
    const stream = streams.find((p) => p.project_id === stage.project)!

    // the operator's step, then a browser that resumes with the cursor it held on the lost timeline
    const fresh = await stage.addRunner("restored", { DATABASE_URL: restoredUrl })
    // as an operator does it: npm run ops against the one runner on the restored database
    const ops = spawnSync(
      "npm",
      ["run", "-s", "ops", "--", "streams", "new-epoch", "--reason", `drill: PITR to restore point ${POINT}`],
      { env: { ...process.env, OPS_URL: fresh.url, OPS_TOKEN: await operatorToken() }, encoding: "utf8" }
    )
    if (ops.status !== 0) throw new Error(`ops streams new-epoch: exit ${ops.status}: ${ops.stdout}${ops.stderr}`)
    log(`ops streams new-epoch: ${ops.stdout.trim().split("\n").at(-1)}`)
    const newEpoch = (await snapshot(db, stage.project)).epoch
    const resumed = follow(eventsUrl(fresh), stage.token, held)
    clients.push(resumed)
    await waitFor("the resumed browser gets a frame", () => resumed.frames.length > 0, 30_000)
    const firstFrame = resumed.frames[0]!
    const reset = firstFrame.event === "reset"
      ? JSON.parse(firstFrame.data) as { reason: string; cursor: string }
      : undefined
    const oldEpochFrames = resumed.frames.filter((f) => f.id !== undefined && !f.id.startsWith(`${newEpoch}-`)).length

    const problems = [
      ...(diff.missing > 0 ? [`${diff.missing} rows committed before the point are missing after the restore`] : []),
      ...(diff.extra > 0 ? [`${diff.extra} rows of the restore were not committed at the point`] : []),
      ...(diff.afterPoint === 0 ? ["nothing committed after the point: the drill tested nothing"] : []),
      ...(got.lastSeq !== before.lastSeq
        ? [`stream head ${got.lastSeq} after the restore, ${before.lastSeq} at the point`]
        : []),
      ...(ledger > 0 ? [`${ledger} tasks with an unbalanced ledger`] : []),
      ...(gaps > 0 ? [`${gaps} tasks with event gaps`] : []),
      ...(brokenStreams.length === 0 ? [] : [`streams not gap-free: ${JSON.stringify(brokenStreams)}`]),
      ...(reset?.reason === "foreign_epoch" && reset.cursor.startsWith(`${newEpoch}-`)
        ? []
        : [`a browser resuming with ${held} got ${JSON.stringify(firstFrame)} first, not a foreign_epoch reset`]),
      ...(oldEpochFrames > 0 ? [`${oldEpochFrames} frames under another epoch after the new one`] : [])
    ]
    return {
      drill: "pitr",
      fault: `restore of a base backup + WAL archive to a restore point (${before.events.size} events before it, ` +
        `${diff.afterPoint} after) into a new cluster`,
      behaviour:
        "every commit before the point and none after; ledger balanced; streams gap-free; after streams new-epoch an " +
        "old cursor gets a foreign_epoch reset",
      rtoS,
      rtoMeasures: `restore start → restored cluster read-write; WAL replay to promotion ${replayS.toFixed(1)} s`,
      rpo: `0 commits before the point lost (${diff.missing} missing, ${diff.extra} extra of ${
        before.events.size + before.tasks.size + before.ledger.size
      } rows)`,
      figures: `${got.taskIds.length} tasks restored of ${first.length + second.length} admitted; ` +
        `ledger diffs ${ledger}, event gaps ${gaps}, ${streams.length} streams gap-free: ${
          brokenStreams.length === 0
        }, stream ${stream.retained + 1}..${stream.last} (${stream.n} ` +
        `events); epoch ${got.epoch} → ${newEpoch}; resumed ${held} → ${reset?.reason ?? firstFrame.event} ${
          reset?.cursor ?? ""
        }`,
      manualSteps: "stop runners, restore (recovery.signal, restore point), start one runner, ops streams new-epoch",
      passed: problems.length === 0,
      problems
    }
  } finally {
    for (const c of clients) c.close()
    await restoredDb?.end().catch(() => undefined)
    await stage.close()
    restored?.remove()
    if (restored === undefined && backupDir !== undefined) {
      fs.rmSync(backupDir, { recursive: true, force: true })
    }
    primary.remove()
    archive.remove()
  }
}
