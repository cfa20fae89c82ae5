import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"
import type { AttemptId, TaskId } from "../schema/ids.js"
import { makeGroupCommit, oneByOneOnFailure } from "./GroupCommit.js"
import { storageUnavailable } from "./storageUnavailable.js"

const unavailable = storageUnavailable("attempt schedule")

export interface PollSchedule {
  readonly nextPollAt: Date | null
  readonly pollFailures: number
  readonly pollLeaseUntil: Date | null
  readonly cancelSentAt: Date | null
}

/** The columns of a task_attempts row that hold its poll schedule. */
export interface ScheduleRow {
  readonly next_poll_at: Date | null
  readonly poll_failures: number
  readonly poll_lease_until: Date | null
  readonly cancel_sent_at: Date | null
}

/** The poll schedule in a task_attempts row (AttemptSchedule.get's, or the whole row a task's load reads). */
export const scheduleFromRow = (r: ScheduleRow): PollSchedule => ({
  nextPollAt: r.next_poll_at,
  pollFailures: r.poll_failures,
  pollLeaseUntil: r.poll_lease_until,
  cancelSentAt: r.cancel_sent_at
})

/** A held poll lease: the token the holder must show to finish the poll. */
export interface PollLease {
  readonly token: string
  readonly latenessMs: number
}

/** What a finished poll writes: its next poll `delayMs` from now, whether it failed, and its error. */
interface PollOutcome {
  readonly delayMs: number
  readonly failed: boolean
  readonly error: string | null
}

/** A poll's end, written as one group's row: the lease given back and the next poll scheduled. */
interface Finish extends PollOutcome {
  readonly attemptId: AttemptId
  readonly token: string
}

/**
 * The poller's durable bookkeeping, beside the versioned task state (nothing here is a task change, so no
 * event): when each attempt is polled next, its failures, and a poll lease. The lease makes one poll in flight
 * per attempt, even across runners: a runner killed mid-poll keeps its lease until it expires, then the new
 * owner polls. Also the provider/model/tenant submission slots.
 */
export class AttemptSchedule extends Effect.Service<AttemptSchedule>()("AttemptSchedule", {
  scoped: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const get = Effect.fn("AttemptSchedule.get")(function*(attemptId: AttemptId) {
      const rows = yield* sql<ScheduleRow>`
        SELECT next_poll_at, poll_failures, poll_lease_until, cancel_sent_at FROM task_attempts WHERE id = ${attemptId}`
      return Option.map(Option.fromNullable(rows[0]), scheduleFromRow)
    }, Effect.catchTag("SqlError", unavailable))

    /**
     * Claims asked for meanwhile go to PostgreSQL together, one statement per group, and so do finishes (below): at
     * 10,000 parked tasks under a provider quota every poll claims and finishes (bench:polling: they were two of every
     * three statements the runner sent). A group's attempts are distinct in practice (one lifecycle per task); an
     * attempt named twice in one group is claimed for its first asker only. A group that fails (a deadlock with
     * another runner's group during a handoff) is tried again one claim at a time, so only a culprit fails.
     */
    const claims = yield* makeGroupCommit({
      name: "poll_claims",
      parallelism: 2,
      maxBatch: 500,
      run: (items: ReadonlyArray<{ readonly attemptId: AttemptId; readonly leaseMs: number }>) =>
        oneByOneOnFailure(items, (group) =>
          Effect.map(
            sql.unsafe<{ id: string; token: string; lateness_ms: number }>(
              `UPDATE task_attempts a SET
                 poll_lease_token = gen_random_uuid(),
                 poll_lease_until = now() + make_interval(secs => c.lease_s),
                 last_polled_at = now(),
                 last_poll_lateness_ms =
                   GREATEST(0, (extract(epoch FROM now() - COALESCE(a.next_poll_at, now())) * 1000))::int
               FROM unnest($1::uuid[], $2::float8[]) AS c(id, lease_s)
               WHERE a.id = c.id AND (a.next_poll_at IS NULL OR a.next_poll_at <= now())
                 AND (a.poll_lease_until IS NULL OR a.poll_lease_until < now())
               RETURNING a.id, a.poll_lease_token AS token, a.last_poll_lateness_ms AS lateness_ms`,
              [group.map((i) => i.attemptId), group.map((i) => i.leaseMs / 1000)]
            ),
            (rows) => {
              const won = new Map(rows.map((r) => [String(r.id), r]))
              return group.map(({ attemptId }) => {
                const row = won.get(attemptId)
                won.delete(attemptId)
                return row === undefined
                  ? Option.none<PollLease>()
                  : Option.some<PollLease>({ token: row.token, latenessMs: row.lateness_ms })
              })
            }
          ))
    })

    const finishes = yield* makeGroupCommit({
      name: "poll_finishes",
      parallelism: 2,
      maxBatch: 500,
      run: (items: ReadonlyArray<Finish>) =>
        oneByOneOnFailure(items, (group) =>
          Effect.as(
            sql.unsafe(
              `UPDATE task_attempts a SET poll_lease_until = NULL, poll_lease_token = NULL,
                 next_poll_at = now() + make_interval(secs => f.delay_s),
                 poll_failures = CASE WHEN f.failed THEN a.poll_failures + 1 ELSE 0 END,
                 last_poll_error = f.error
               FROM unnest($1::uuid[], $2::uuid[], $3::float8[], $4::bool[], $5::text[])
                 AS f(id, token, delay_s, failed, error)
               WHERE a.id = f.id AND a.poll_lease_token = f.token`,
              [
                group.map((i) => i.attemptId),
                group.map((i) => i.token),
                group.map((i) => i.delayMs / 1000),
                group.map((i) => i.failed),
                group.map((i) => i.error)
              ]
            ),
            group.map(() => undefined)
          ))
    })

    /** Takes the attempt's poll lease if the poll is due and nobody holds it; records how late the poll is. */
    const claim = Effect.fn("AttemptSchedule.claim")(function*(attemptId: AttemptId, leaseMs: number) {
      return yield* yield* claims({ attemptId, leaseMs })
    }, Effect.catchTag("SqlError", unavailable))

    /** Releases the lease (only the holder's: a stale holder past its lease changes nothing) and schedules. */
    const finish = Effect.fn("AttemptSchedule.finish")(function*(
      attemptId: AttemptId,
      lease: PollLease,
      next: PollOutcome
    ) {
      yield* yield* finishes({ attemptId, token: lease.token, ...next })
    }, Effect.catchTag("SqlError", unavailable))

    /**
     * Gives the lease back without a result (the poll was interrupted: its entity is moving to another runner), so
     * the new owner polls at once instead of waiting out the lease. Only the holder's; the schedule stays due.
     */
    const release = Effect.fn("AttemptSchedule.release")(function*(attemptId: AttemptId, lease: PollLease) {
      yield* sql`
        UPDATE task_attempts SET poll_lease_until = NULL, poll_lease_token = NULL
        WHERE id = ${attemptId} AND poll_lease_token = ${lease.token}`
    }, Effect.catchTag("SqlError", unavailable))

    /** Schedules without polling (the first poll of a job, a wait for a submission slot, an unknown submit). */
    const schedule = Effect.fn("AttemptSchedule.schedule")(function*(attemptId: AttemptId, delayMs: number) {
      yield* sql`
        UPDATE task_attempts SET next_poll_at = now() + make_interval(secs => ${delayMs / 1000})
        WHERE id = ${attemptId}`
    }, Effect.catchTag("SqlError", unavailable))

    /** Brings the attempt's next poll forward to now (never later): an unsigned callback must be confirmed. */
    const pollSoon = Effect.fn("AttemptSchedule.pollSoon")(function*(attemptId: AttemptId) {
      yield* sql`
        UPDATE task_attempts SET next_poll_at = now()
        WHERE id = ${attemptId} AND (next_poll_at IS NULL OR next_poll_at > now())`
    }, Effect.catchTag("SqlError", unavailable))

    const markCancelSent = Effect.fn("AttemptSchedule.markCancelSent")(function*(attemptId: AttemptId) {
      yield* sql`UPDATE task_attempts SET cancel_sent_at = now() WHERE id = ${attemptId}`
    }, Effect.catchTag("SqlError", unavailable))

    /**
     * One provider/model/tenant concurrency slot for the attempt (idempotent: an attempt holding one keeps it).
     * The scope is locked for the check, so concurrent submitters of one scope never exceed the limit.
     */
    const acquireSlot = Effect.fn("AttemptSchedule.acquireSlot")(function*(
      scope: string,
      attemptId: AttemptId,
      limit: number
    ) {
      // one statement: the scope's lock is held only while PostgreSQL runs it (migrations/0015)
      const [row] = yield* sql<{ held: boolean }>`
        SELECT acquire_submission_slot(${scope}, ${attemptId}, ${limit}) AS held`
      return row?.held === true
    }, Effect.catchTag("SqlError", unavailable))

    /** What the user asked for: the submission's input (decoded at the API edge, stored with the task). */
    const requestOf = Effect.fn("AttemptSchedule.requestOf")(function*(taskId: TaskId) {
      const rows = yield* sql<
        { request: { prompt?: string; duration_seconds?: number; resolution?: "480p" | "720p" | "1080p" } }
      >`
        SELECT request FROM generation_tasks WHERE id = ${taskId}`
      const r = rows[0]
      return {
        prompt: r?.request.prompt ?? "",
        durationSeconds: r?.request.duration_seconds ?? 5,
        // the API's default, for tasks stored before it was read here
        resolution: r?.request.resolution ?? "720p"
      }
    }, Effect.catchTag("SqlError", unavailable))

    return { requestOf, get, claim, finish, release, schedule, pollSoon, markCancelSent, acquireSlot } as const
  })
}) {}
