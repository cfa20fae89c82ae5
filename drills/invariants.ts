/**
 * The promises a drill (and the soak) checks once the failure is over, from PostgreSQL and the simulator's own
 * books: every task terminal and equal to the provider's truth, no job submitted twice, the ledger balanced per
 * task, every task's event stream gap-free up to its version.
 */
import type pg from "pg"
import { request } from "./stage.js"

export interface Invariants {
  readonly tasks: number
  /** Tasks not terminal. */
  readonly stuck: number
  /** Terminal tasks whose outcome differs from the simulator's job (ready ⇔ succeeded). */
  readonly wrong: number
  /** Idempotency keys the simulator accepted more than once, and tasks with more than one job. */
  readonly duplicateSubmissions: number
  /** Tasks whose ledger is not one reserve and, once terminal, one settle (ready) or one refund (otherwise). */
  readonly ledgerDiffs: number
  /** Tasks whose events do not cover every version from the first to the task's own, once each. */
  readonly eventGaps: number
}

export const violations = (i: Invariants) => i.stuck + i.wrong + i.duplicateSubmissions + i.ledgerDiffs + i.eventGaps

export const describeInvariants = (i: Invariants) =>
  `${i.tasks} tasks: stuck ${i.stuck}, wrong outcome ${i.wrong}, duplicate submissions ${i.duplicateSubmissions}, ` +
  `ledger diffs ${i.ledgerDiffs}, event gaps ${i.eventGaps}`

interface SimJob {
  readonly key: string
  readonly outcome: string
}

export const checkInvariants = async (db: pg.Pool, sim: string, ids: ReadonlyArray<string>): Promise<Invariants> => {
  const jobs = (await request(`${sim}/_sim/jobs`)).body as Array<SimJob>
  const counts = (await request(`${sim}/_sim/counts`)).body as { submissions: Record<string, number> }
  const outcomeByKey = new Map(jobs.map((j) => [j.key, j.outcome]))
  const jobsPerKey = new Map<string, number>()
  for (const j of jobs) jobsPerKey.set(j.key, (jobsPerKey.get(j.key) ?? 0) + 1)

  const tasks = (await db.query(
    `SELECT t.id, t.status, t.terminal_at IS NOT NULL AS terminal, t.version::int AS version,
            array_agg(a.client_request_id) AS keys,
            (SELECT a2.client_request_id FROM task_attempts a2 WHERE a2.id = t.current_attempt_id) AS current_key
     FROM generation_tasks t JOIN task_attempts a ON a.task_id = t.id
     WHERE t.id = ANY($1::uuid[]) GROUP BY t.id`,
    [ids]
  )).rows as Array<
    { id: string; status: string; terminal: boolean; version: number; keys: Array<string>; current_key: string }
  >
  let stuck = ids.length - tasks.length
  let wrong = 0
  let duplicateSubmissions = Object.values(counts.submissions).filter((n) => n > 1).length
  for (const t of tasks) {
    if (!t.terminal) {
      stuck++
      continue
    }
    if (t.keys.filter((k) => jobsPerKey.has(k)).length > 1 || t.keys.some((k) => (jobsPerKey.get(k) ?? 0) > 1)) {
      duplicateSubmissions++
    }
    const truth = outcomeByKey.get(t.current_key)
    const expected = truth === "succeeded" ? "ready" : truth
    if (truth !== undefined && t.status !== expected) wrong++
  }

  const ledger = await ledgerDiffs(db, ids)
  const gaps = await eventGaps(db, ids)

  return { tasks: ids.length, stuck, wrong, duplicateSubmissions, ledgerDiffs: ledger, eventGaps: gaps }
}

/** Terminal tasks of `ids` whose ledger is not one reserve and one settle (ready) or one refund (otherwise). */
export const ledgerDiffs = async (db: pg.Pool, ids: ReadonlyArray<string>) =>
  (await db.query(
    `SELECT t.id FROM generation_tasks t
   LEFT JOIN LATERAL (
     SELECT count(*) FILTER (WHERE l.ledger_type = 'reserve') AS reserves,
            count(*) FILTER (WHERE l.ledger_type = 'settle') AS settles,
            count(*) FILTER (WHERE l.ledger_type = 'refund') AS refunds,
            sum(l.amount) FILTER (WHERE l.ledger_type = 'reserve') AS reserved,
            sum(l.amount) FILTER (WHERE l.ledger_type IN ('settle', 'refund')) AS closed
     FROM credit_ledger l WHERE l.task_id = t.id) l ON true
   WHERE t.id = ANY($1::uuid[]) AND t.terminal_at IS NOT NULL
     AND NOT (l.reserves = 1 AND l.settles + l.refunds = 1 AND l.reserved = l.closed
              AND (l.settles = 1) = (t.status = 'ready'))`,
    [ids]
  )).rowCount ?? 0

/** Tasks of `ids` whose events do not cover every version from the first to the task's own, once each. */
export const eventGaps = async (db: pg.Pool, ids: ReadonlyArray<string>) =>
  (await db.query(
    `SELECT t.id FROM generation_tasks t
   LEFT JOIN LATERAL (SELECT count(*) AS n, count(DISTINCT e.task_version) AS d, min(e.task_version) AS lo,
                             max(e.task_version) AS hi
                      FROM task_events e WHERE e.task_id = t.id) e ON true
   WHERE t.id = ANY($1::uuid[]) AND NOT (e.n = e.d AND e.hi = t.version AND e.hi - e.lo + 1 = e.n)`,
    [ids]
  )).rowCount ?? 0

/** Tasks of `ids` not terminal yet whose ledger is not exactly one reserve, or already holds a settle or refund. */
export const openLedgerDiffs = async (db: pg.Pool, ids: ReadonlyArray<string>) =>
  (await db.query(
    `SELECT t.id FROM generation_tasks t
     LEFT JOIN LATERAL (
       SELECT count(*) FILTER (WHERE l.ledger_type = 'reserve') AS reserves,
              count(*) FILTER (WHERE l.ledger_type IN ('settle', 'refund')) AS closings
       FROM credit_ledger l WHERE l.task_id = t.id) l ON true
     WHERE t.id = ANY($1::uuid[]) AND t.terminal_at IS NULL AND NOT (l.reserves = 1 AND l.closings = 0)`,
    [ids]
  )).rowCount ?? 0
