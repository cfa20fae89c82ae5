import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"
import { EventCursor } from "../schema/cursor.js"
import type { ProjectId, TenantId } from "../schema/ids.js"
import type { TaskSnapshot } from "../schema/task.js"
import { storageUnavailable } from "./storageUnavailable.js"
import { taskFromRow } from "./TaskStore.js"

const unavailable = storageUnavailable("task snapshots")

export interface TaskPage {
  readonly tasks: ReadonlyArray<TaskSnapshot>
  /** the project's stream head in the same snapshot as the tasks: follow events after it */
  readonly cursor: EventCursor
}

/**
 * A page of a project's tasks, newest first, and the stream cursor to follow from, read in ONE statement (one
 * snapshot): every change after the page is an event after the cursor, so snapshot + events miss nothing.
 */
export class TaskSnapshots extends Effect.Service<TaskSnapshots>()("TaskSnapshots", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const page = Effect.fn("TaskSnapshots.page")(
      function*(tenantId: TenantId, projectId: ProjectId, limit: number, before: string | undefined) {
        const rows = yield* sql<Record<string, any>>`
          WITH head AS (
            SELECT stream_epoch, last_seq AS head_seq FROM projects
            WHERE project_id = ${projectId} AND tenant_id = ${tenantId}),
          anchor AS (
            SELECT created_at, id FROM generation_tasks WHERE id = ${
          before ?? null
        }::uuid AND project_id = ${projectId})
          SELECT h.stream_epoch, h.head_seq, t.* FROM head h
          LEFT JOIN LATERAL (
            SELECT * FROM generation_tasks g
            WHERE g.project_id = ${projectId}
              AND (${before === undefined} OR (g.created_at, g.id) < (SELECT created_at, id FROM anchor))
            ORDER BY g.created_at DESC, g.id DESC LIMIT ${limit}) t ON true`
        const first = rows[0]
        if (first === undefined) return Option.none<TaskPage>()
        return Option.some<TaskPage>({
          tasks: rows.filter((r) => r.id !== null).map(taskFromRow),
          cursor: new EventCursor({ epoch: Number(first.stream_epoch), seq: Number(first.head_seq) })
        })
      },
      Effect.catchTag("SqlError", unavailable)
    )

    return { page } as const
  })
}) {}
