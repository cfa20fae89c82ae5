import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect, Either, Metric, Option, Schema } from "effect"
import * as S from "../config/Settings.js"
import type { TaskState } from "../domain/taskState.js"
import type { Change } from "../domain/transition.js"
import { taskTransitions } from "../observability/metrics.js"
import { seriesBy } from "../observability/series.js"
import { EventCursor } from "../schema/cursor.js"
import { type StorageUnavailable, WriteFenced } from "../schema/errors.js"
import { type AttemptId, TaskId } from "../schema/ids.js"
import type { ProviderObservation } from "../schema/observation.js"
import { AttemptSnapshot, TaskSnapshot, trusted } from "../schema/task.js"
import { type PollSchedule, scheduleFromRow, type ScheduleRow } from "./AttemptSchedule.js"
import { makeGroupCommit, oneByOneOnFailure } from "./GroupCommit.js"
import { storageUnavailable } from "./storageUnavailable.js"
import { logStatusChange } from "./transitionLog.js"
import { WriteFence } from "./WriteFence.js"

const unavailable = storageUnavailable("task store")

/**
 * A task as its load read it: its state, and its current attempt's poll schedule at that moment (the same row), which
 * an entity built for a poll uses instead of reading it again (poller.ts). Not part of the state: it changes with
 * every poll, without a version.
 */
export interface LoadedTask extends TaskState {
  readonly schedule: PollSchedule | null
}

/** The result of one commit attempt: applied, or lost the version CAS (reload and re-evaluate). */
export type CommitResult =
  | { readonly _tag: "Committed"; readonly task: TaskSnapshot; readonly attempt: AttemptSnapshot | null }
  | { readonly _tag: "Stale" }

const TASK_COLUMNS = `t.id, t.tenant_id, t.project_id, t.user_id, t.status, t.stage, t.progress, t.version,
  t.current_attempt_id, t.home_region, t.write_epoch, t.asset_id, t.error_code, t.last_seq, p.stream_epoch,
  t.created_at, t.updated_at, t.terminal_at`

/** The attempt's columns a load reads (attemptFromRow's and scheduleFromRow's), beside the task's in its row. */
const ATTEMPT_FIELDS = [
  "id",
  "task_id",
  "attempt_no",
  "provider",
  "model",
  "client_request_id",
  "provider_task_id",
  "submit_state",
  "last_provider_seq",
  "last_provider_at",
  "unknown_since",
  "submit_started_at",
  "output_deadline_at",
  "output_refs",
  "next_poll_at",
  "poll_failures",
  "poll_lease_until",
  "cancel_sent_at"
] as const
// prefixed: the two tables share column names (id, status…)
const ATTEMPT_COLUMNS = ATTEMPT_FIELDS.map((c) => `a.${c} AS a_${c}`).join(", ")

/** The current attempt's row out of a joined load's row; null when the task has none. */
const attemptOfJoined = (row: Record<string, any>): Record<string, any> | null => {
  if (row.a_id === null) return null
  const attempt: Record<string, any> = {}
  for (const c of ATTEMPT_FIELDS) attempt[c] = row[`a_${c}`]
  return attempt
}

export const taskFromRow = (r: Record<string, any>): TaskSnapshot =>
  new TaskSnapshot({
    id: r.id,
    tenantId: r.tenant_id,
    projectId: r.project_id,
    userId: r.user_id,
    status: r.status,
    stage: r.stage,
    progress: r.progress,
    version: r.version,
    currentAttemptId: r.current_attempt_id,
    homeRegion: r.home_region,
    writeEpoch: r.write_epoch,
    assetId: r.asset_id,
    errorCode: r.error_code,
    lastCursor: new EventCursor({ epoch: r.stream_epoch, seq: r.last_seq }, trusted),
    createdAt: r.created_at,
    updatedAt: r.updated_at,
    terminalAt: r.terminal_at
  }, trusted)

export const attemptFromRow = (r: Record<string, any>): AttemptSnapshot =>
  new AttemptSnapshot({
    id: r.id,
    taskId: r.task_id,
    attemptNo: r.attempt_no,
    provider: r.provider,
    model: r.model,
    clientRequestId: r.client_request_id,
    providerTaskId: r.provider_task_id,
    submitState: r.submit_state,
    lastProviderSeq: r.last_provider_seq,
    lastProviderAt: r.last_provider_at,
    unknownSince: r.unknown_since,
    submitStartedAt: r.submit_started_at,
    outputDeadlineAt: r.output_deadline_at,
    outputRefs: r.output_refs
  }, trusted)

/** The arguments of commit_task_change (migrations/0002) for one change, as one element of a batch. */
interface CommitItem {
  readonly region: string
  readonly epoch: number
  readonly project_id: string
  readonly task_id: string
  readonly expected_version: number
  readonly [column: string]: unknown
}

interface CommitRow {
  readonly fence_ok: boolean
  readonly stream_epoch: number | null
  readonly seq: number | null
}

/** task_transitions_total by source and status (tagged once per pair: on every commit). */
const transitionsCounter = seriesBy(taskTransitions, "source", "to")

/**
 * A task id as the ids schema reads it (a UUID in lower case, as PostgreSQL answers it); anything else is no task, and
 * must not fail its batch-mates' read.
 */
const canonicalTaskId = Schema.decodeUnknownOption(TaskId)

const compare = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0)

export const TaskStoreSettings = S.area("Task store", "the group commit of task changes", {
  parallelism: S.integer("COMMIT_PARALLELISM", "group commit workers, each one connection", 4, { min: 1 }),
  maxBatch: S.integer("COMMIT_MAX_BATCH", "task changes committed in one statement", 64, { min: 1 })
})

/**
 * Reads and writes one task's facts. `commit` is the only way a task changes after creation: one call of
 * commit_task_change (migrations/0002), which checks the write fence, CASes the version, takes the next cursor
 * of the project's stream, and writes the task, the attempt, the task event and the outbox row in one
 * transaction. Concurrent commits of different tasks are grouped into one statement (migrations/0003): one
 * round trip and one WAL flush for the group, each change still all-or-nothing and individually reported.
 */
export class TaskStore extends Effect.Service<TaskStore>()("TaskStore", {
  scoped: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const fence = yield* WriteFence

    /**
     * Tasks asked for meanwhile are read together, with their current attempts: one statement per group, whatever its
     * size. A runner that takes shards over builds their entities all at once (bench:transitions: 200 builds when a
     * round starts), and each build reads its task first; a parked task's poll builds its entity too (bench:polling:
     * one build per poll, where the attempts' own read was one PostgreSQL statement in seven).
     */
    const loads = yield* makeGroupCommit({
      name: "task_loads",
      parallelism: 2,
      maxBatch: 500,
      run: (ids: ReadonlyArray<TaskId>) =>
        Effect.gen(function*() {
          const canonical = ids.map((id) => Option.getOrUndefined(canonicalTaskId(id)))
          const wanted = [...new Set(canonical.filter((id) => id !== undefined))]
          const rows = wanted.length === 0 ? [] : yield* sql.unsafe<Record<string, any>>(
            `SELECT ${TASK_COLUMNS}, ${ATTEMPT_COLUMNS} FROM generation_tasks t
             JOIN projects p ON p.project_id = t.project_id
             LEFT JOIN task_attempts a ON a.id = t.current_attempt_id
             WHERE t.id = ANY($1::uuid[])`,
            [wanted]
          )
          // each row decoded once, however many of the asked ids name its task
          const loaded = new Map(rows.map((row) => {
            const attempt = attemptOfJoined(row)
            return [String(row.id), {
              task: taskFromRow(row),
              attempt: attempt === null ? null : attemptFromRow(attempt),
              schedule: attempt === null ? null : scheduleFromRow(attempt as ScheduleRow)
            }] as const
          }))
          return canonical.map((id) => Option.fromNullable(id === undefined ? undefined : loaded.get(id)))
        })
    })

    const load = (taskId: TaskId): Effect.Effect<Option.Option<LoadedTask>, StorageUnavailable> =>
      loads(taskId).pipe(
        Effect.catchTag("SqlError", (error) => unavailable(error).pipe(Effect.annotateLogs({ task_id: taskId })))
      )

    const runBatch = (items: ReadonlyArray<CommitItem>) =>
      sql<CommitRow & { ord: number }>`SELECT * FROM commit_task_changes(${JSON.stringify(items)}::jsonb)`.pipe(
        Effect.map((rows) => {
          const byOrd = new Array<CommitRow>(items.length)
          for (const row of rows) byOrd[row.ord] = row
          return byOrd
        })
      )

    // One failing change (a constraint, a deadlock with a zombie writer) must not fail its batch-mates:
    // on error the batch is retried one change at a time, and only the culprit fails.
    const groupCommit = yield* Effect.orDie(TaskStoreSettings.config)
    const enqueue = yield* makeGroupCommit({
      name: "task_store",
      parallelism: groupCommit.parallelism,
      maxBatch: groupCommit.maxBatch,
      run: (items: ReadonlyArray<CommitItem>) => {
        // stream (project) locks are taken in one global order by every batch
        const order = items.map((_, i) => i).sort((x, y) =>
          compare(items[x]!.project_id, items[y]!.project_id) || compare(items[x]!.task_id, items[y]!.task_id)
        )
        const sorted = order.map((i) => items[i]!)
        const unsort = (rows: ReadonlyArray<Either.Either<CommitRow, SqlError>>) => {
          const out = new Array<Either.Either<CommitRow, SqlError>>(items.length)
          order.forEach((original, position) => (out[original] = rows[position]!))
          return out
        }
        return Effect.map(oneByOneOnFailure(sorted, runBatch), unsort)
      }
    })

    const commit = Effect.fn("TaskStore.commit")(function*(expected: TaskSnapshot, change: Change) {
      const next = change.task
      const a = change.attempt
      const eventId = crypto.randomUUID()
      // the claim at this moment: a bump between here and the commit makes the database refuse it
      const token = fence.current()
      const result = yield* enqueue({
        region: token.region,
        epoch: token.epoch,
        project_id: next.projectId,
        task_id: next.id,
        expected_version: expected.version,
        status: next.status,
        stage: next.stage,
        progress: next.progress,
        version: next.version,
        current_attempt_id: next.currentAttemptId,
        asset_id: next.assetId,
        error_code: next.errorCode,
        updated_at: next.updatedAt,
        terminal_at: next.terminalAt,
        attempt_id: a?.id ?? null,
        submit_state: a?.submitState ?? null,
        provider_task_id: a?.providerTaskId ?? null,
        last_provider_seq: a?.lastProviderSeq ?? null,
        last_provider_at: a?.lastProviderAt ?? null,
        unknown_since: a?.unknownSince ?? null,
        submit_started_at: a?.submitStartedAt ?? null,
        output_deadline_at: a?.outputDeadlineAt ?? null,
        output_refs: a?.outputRefs ?? [],
        new_attempt: change.newAttempt === true,
        attempt_no: a?.attemptNo ?? null,
        provider: a?.provider ?? null,
        model: a?.model ?? null,
        client_request_id: a?.clientRequestId ?? null,
        event_id: eventId,
        event_type: change.eventType,
        public_payload: change.publicPayload,
        source: change.source,
        trace_id: change.domainEvent.trace_id,
        domain_event: { ...change.domainEvent, event_id: eventId }
      })
      if (Either.isLeft(result)) {
        // an entity's Observe puts no log annotation around its commit (GenerationTaskLive's logKeys): the failure
        // line names its task and its work itself
        return yield* unavailable(result.left).pipe(
          Effect.annotateLogs({ task_id: next.id, trace_id: change.domainEvent.trace_id })
        )
      }
      const row = result.right
      if (!row.fence_ok) {
        const { mode } = fence.view()
        return yield* new WriteFenced({
          reason: `region ${token.region} epoch ${token.epoch} may not write now (mode ${mode})`,
          mode
        })
      }
      if (row.seq === null || row.stream_epoch === null) return { _tag: "Stale" } as CommitResult
      yield* Metric.increment(transitionsCounter(change.source, next.status))
      const task = new TaskSnapshot({
        ...next,
        homeRegion: token.region,
        writeEpoch: token.epoch,
        lastCursor: new EventCursor({ epoch: row.stream_epoch, seq: row.seq }, trusted)
      }, trusted)
      yield* logStatusChange(expected.status, task, { source: change.source, traceId: change.domainEvent.trace_id })
      return { _tag: "Committed", task, attempt: a } as CommitResult
    })

    /** Contradictory or suspicious facts go to reconciliation, once per (task, dedup key). */
    const recordReconciliation = Effect.fn("TaskStore.recordReconciliation")(function*(
      taskId: TaskId,
      attemptId: AttemptId | null,
      reason: string,
      observation: ProviderObservation
    ) {
      yield* sql`
        INSERT INTO task_reconciliations (task_id, attempt_id, reason, dedup_key, observation)
        VALUES (${taskId}, ${attemptId}, ${reason}, ${observation.dedupKey},
                ${
        JSON.stringify({ status: observation.status, source: observation.source, provider: observation.provider })
      }::jsonb)
        ON CONFLICT (task_id, dedup_key) DO NOTHING`
    }, Effect.catchTag("SqlError", unavailable))

    return { load, commit, recordReconciliation, fence: fence.current } as const
  })
}) {}
