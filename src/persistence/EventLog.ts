import { SqlClient } from "@effect/sql"
import { Chunk, Duration, Effect, Option, Schema, Stream } from "effect"
import { EventCursor } from "../schema/cursor.js"
import { PublicTaskPayload, TaskEventType } from "../schema/events.js"
import type { ProjectId, TenantId } from "../schema/ids.js"
import { storageUnavailable } from "./storageUnavailable.js"

const unavailable = storageUnavailable("event log")

/** Where a project's stream stands: its epoch, its last cursor sequence, and the last one forgotten by retention. */
export interface StreamHead {
  readonly epoch: number
  readonly lastSeq: number
  readonly retainedSeq: number
}

/** One event of a project's stream, as a browser may see it. */
export interface StreamEvent {
  readonly seq: number
  readonly cursor: string
  readonly type: TaskEventType
  readonly payload: PublicTaskPayload
}

/** Why a cursor cannot be served: the client must take a new snapshot (SSE `event: reset`). */
export type CursorProblem = "foreign_epoch" | "expired" | "ahead_of_stream"

/** Whether events after `cursor` can be replayed gap-free from this stream. */
export const checkCursor = (head: StreamHead, cursor: EventCursor): CursorProblem | null =>
  cursor.epoch !== head.epoch
    ? "foreign_epoch"
    : cursor.seq < head.retainedSeq
    ? "expired"
    : cursor.seq > head.lastSeq
    ? "ahead_of_stream"
    : null

const decodePayload = Schema.decodeUnknownSync(PublicTaskPayload)
const decodeType = Schema.decodeUnknownSync(TaskEventType)

const eventFromRow = (
  r: { cursor_seq: number; stream_epoch: number; event_type: string; public_payload: unknown }
) => ({
  seq: Number(r.cursor_seq),
  cursor: new EventCursor({ epoch: Number(r.stream_epoch), seq: Number(r.cursor_seq) }).toString(),
  type: decodeType(r.event_type),
  // decoding keeps exactly the public fields, whatever else the row holds
  payload: decodePayload(r.public_payload)
})

/**
 * The stored side of browser delivery: project stream heads, pages of events by cursor, replay as a Stream, the
 * retention sweep, and spending single-use stream tokens.
 */
export class EventLog extends Effect.Service<EventLog>()("EventLog", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /**
     * The head of a project's stream as `tenantId` may see it; a project is created on first use by the tenant
     * whose token names it (as task admission does), and another tenant's project does not exist.
     */
    const open = Effect.fn("EventLog.open")(function*(tenantId: TenantId, projectId: ProjectId) {
      const rows = yield* sql<{ tenant_id: string; stream_epoch: number; last_seq: number; retained_seq: number }>`
        WITH created AS (
          INSERT INTO projects (project_id, tenant_id, stream_epoch)
          VALUES (${projectId}, ${tenantId}, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
          ON CONFLICT (project_id) DO NOTHING
          RETURNING tenant_id, stream_epoch, last_seq, retained_seq)
        SELECT tenant_id, stream_epoch, last_seq, retained_seq FROM created
        UNION ALL
        SELECT tenant_id, stream_epoch, last_seq, retained_seq FROM projects WHERE project_id = ${projectId}`
      const row = rows[0]
      if (row === undefined || row.tenant_id !== tenantId) return Option.none<StreamHead>()
      return Option.some<StreamHead>({
        epoch: Number(row.stream_epoch),
        lastSeq: Number(row.last_seq),
        retainedSeq: Number(row.retained_seq)
      })
    }, Effect.catchTag("SqlError", unavailable))

    /** Up to `limit` events after `afterSeq`, in cursor order. */
    const page = Effect.fn("EventLog.page")(function*(projectId: string, afterSeq: number, limit: number) {
      const rows = yield* sql<
        { cursor_seq: number; stream_epoch: number; event_type: string; public_payload: unknown }
      >`
        SELECT cursor_seq, stream_epoch, event_type, public_payload FROM task_events
        WHERE project_id = ${projectId} AND cursor_seq > ${afterSeq}
        ORDER BY cursor_seq LIMIT ${limit}`
      return rows.map(eventFromRow)
    }, Effect.catchTag("SqlError", unavailable))

    /** Every event after `afterSeq` that is committed while the stream is read: pages over the cursor. */
    const replay = (projectId: string, afterSeq: number, pageSize = 500) =>
      Stream.paginateChunkEffect(afterSeq, (after) =>
        Effect.map(page(projectId, after, pageSize), (events) => {
          const last = events[events.length - 1]
          return [
            Chunk.unsafeFromArray(events),
            events.length < pageSize || last === undefined ? Option.none() : Option.some(last.seq)
          ] as const
        }))

    /** Last sequence and epoch of many projects in one query (the gateway's tail of PostgreSQL). */
    const heads = Effect.fn("EventLog.heads")(function*(projectIds: ReadonlyArray<string>) {
      if (projectIds.length === 0) return new Map<string, { epoch: number; lastSeq: number }>()
      const rows = yield* sql<{ project_id: string; stream_epoch: number; last_seq: number }>`
        SELECT project_id, stream_epoch, last_seq FROM projects WHERE project_id = ANY(${projectIds})`
      return new Map(rows.map((r) => [r.project_id, { epoch: Number(r.stream_epoch), lastSeq: Number(r.last_seq) }]))
    }, Effect.catchTag("SqlError", unavailable))

    /**
     * Forgets events older than `retention` (a batch at a time) and records, per project, the last sequence
     * forgotten: a cursor before it is answered with a reset.
     */
    const forget = Effect.fn("EventLog.forget")(function*(retention: Duration.Duration, batch: number) {
      const rows = yield* sql<{ n: number }>`
        WITH doomed AS (
          DELETE FROM task_events WHERE event_id IN (
            SELECT event_id FROM task_events
            WHERE created_at < now() - make_interval(secs => ${Duration.toSeconds(retention)})
            LIMIT ${batch})
          RETURNING project_id, cursor_seq),
        per_project AS (SELECT project_id, max(cursor_seq) AS seq, count(*) AS n FROM doomed GROUP BY project_id),
        moved AS (
          UPDATE projects p SET retained_seq = GREATEST(p.retained_seq, d.seq)
          FROM per_project d WHERE p.project_id = d.project_id)
        SELECT COALESCE(sum(n), 0)::int AS n FROM per_project`
      return rows[0]?.n ?? 0
    }, Effect.catchTag("SqlError", unavailable))

    /** Spends a single-use stream token: true the first time, false ever after (on any runner). */
    const spendToken = Effect.fn("EventLog.spendToken")(function*(tokenId: string, expiresAt: Date) {
      const rows = yield* sql`
        INSERT INTO spent_stream_tokens (token_id, expires_at) VALUES (${tokenId}, ${expiresAt})
        ON CONFLICT (token_id) DO NOTHING RETURNING token_id`
      return rows.length === 1
    }, Effect.catchTag("SqlError", unavailable))

    /** Spent tokens past their expiry can no longer be presented: their rows can go. */
    const forgetSpentTokens = sql`DELETE FROM spent_stream_tokens WHERE expires_at < now() - interval '1 minute'`.pipe(
      Effect.asVoid,
      Effect.catchTag("SqlError", unavailable)
    )

    return { open, page, replay, heads, forget, spendToken, forgetSpentTokens } as const
  })
}) {}
