import { SqlClient } from "@effect/sql"
import { Effect, Metric } from "effect"
import type { ProjectId } from "../schema/ids.js"
import { currentTraceId } from "../tracing/TraceId.js"
import { OperatorAudit } from "./OperatorAudit.js"
import { storageUnavailable } from "./storageUnavailable.js"

const unavailable = storageUnavailable("stream epochs")

const streamEpochBumps = Metric.counter("stream_epoch_bumps_total", {
  description: "project event streams given a new epoch by an operator (after a restore): their old cursors reset",
  incremental: true
})

/** One project's stream as the bump left it. */
export interface EpochChange {
  readonly projectId: string
  readonly from: number
  readonly to: number
}

/**
 * New stream epochs, for a database restored to a point in time (PITR) or otherwise rebuilt: its streams reuse
 * sequence numbers the lost timeline had already given to other events, so every cursor handed out before must be
 * answered with a `reset` (foreign_epoch), never served. The epoch becomes the current time in ms (as at creation),
 * and at least the old one + 1: an epoch no cursor of either timeline carries unless the clocks went back. The
 * sequence goes on from `last_seq` (task_events' (project_id, cursor_seq) stays unique). Gateways see the new epoch
 * in their next tail tick (GATEWAY_TAIL_INTERVAL) or first bus message of it, and close their streams: the clients
 * reconnect with an old cursor and get the reset.
 */
export class StreamEpochs extends Effect.Service<StreamEpochs>()("StreamEpochs", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const audit = yield* OperatorAudit

    /** Every project's stream (or `projectId`'s only), in one transaction with its audit row. */
    const bump = (operator: string, projectId: ProjectId | undefined, reason: string) =>
      Effect.gen(function*() {
        // rows locked in project order, as commit batches lock them: a commit in flight finishes first (its event
        // keeps the old epoch), and no deadlock
        const rows = yield* sql<{ project_id: string; from_epoch: string; to_epoch: string }>`
          WITH locked AS (
            SELECT project_id, stream_epoch FROM projects
            WHERE ${projectId === undefined} OR project_id = ${projectId ?? null}::uuid
            ORDER BY project_id FOR UPDATE)
          UPDATE projects p
          SET stream_epoch = GREATEST(l.stream_epoch + 1, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
          FROM locked l WHERE p.project_id = l.project_id
          RETURNING p.project_id, l.stream_epoch AS from_epoch, p.stream_epoch AS to_epoch`
        const changes: Array<EpochChange> = rows
          .map((r) => ({ projectId: r.project_id, from: Number(r.from_epoch), to: Number(r.to_epoch) }))
          .sort((a, b) => a.projectId.localeCompare(b.projectId))
        if (changes.length === 0) return changes
        const one = projectId !== undefined ? changes[0] : undefined
        yield* audit.record({
          operator,
          what: "stream-epoch",
          subject: projectId ?? `all projects (${changes.length})`,
          from: one === undefined ? null : String(one.from),
          to: one === undefined ? `${changes.length} new epochs` : String(one.to),
          reason
        })
        return changes
      }).pipe(
        sql.withTransaction,
        Effect.catchTag("SqlError", unavailable),
        Effect.tap((changes) =>
          changes.length === 0 ? Effect.void : Effect.gen(function*() {
            yield* Metric.incrementBy(streamEpochBumps, changes.length)
            const traceId = yield* currentTraceId
            yield* Effect.logWarning(`stream epochs bumped: ${changes.length} project streams, old cursors reset`)
              .pipe(
                Effect.annotateLogs({
                  operator,
                  reason,
                  trace_id: traceId,
                  project_id: projectId ?? "all"
                })
              )
          })
        )
      )

    return { bump } as const
  }),
  dependencies: [OperatorAudit.Default]
}) {}
