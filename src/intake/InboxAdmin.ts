import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { INBOX_CHANNEL } from "../persistence/channels.js"
import { storageUnavailable } from "../persistence/storageUnavailable.js"

const unavailable = storageUnavailable("inbox admin")

export interface InboxAdminRow {
  readonly id: number
  readonly provider: string
  readonly received_at: Date
  readonly attempts: number
  readonly error: string | null
}

export type InboxQueue = "dead" | "orphans"

/**
 * The inbox rows that need an operator: dead ones (unreadable, retries exhausted, no such task) and orphans (no
 * attempt knows their provider id yet). A replay makes them due at once, with their tries counted from zero, and
 * wakes the processors; what still cannot be applied goes back where it was.
 */
export class InboxAdmin extends Effect.Service<InboxAdmin>()("InboxAdmin", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const statusOf = (which: InboxQueue) => (which === "dead" ? "dead" : "orphan")

    const list = (which: InboxQueue) =>
      sql<InboxAdminRow>`
        SELECT id, provider, received_at, retry_count AS attempts,
          COALESCE(last_error_code || COALESCE(': ' || last_error, ''), last_error) AS error
        FROM provider_callback_inbox WHERE process_status = ${statusOf(which)}
        ORDER BY id LIMIT 500`.pipe(Effect.catchTag("SqlError", unavailable))

    const replay = (which: InboxQueue, id: number | "all") =>
      Effect.gen(function*() {
        const rows = yield* sql<{ id: number }>`
          UPDATE provider_callback_inbox SET process_status = 'retry', retry_count = 0, next_retry_at = now()
          WHERE process_status = ${statusOf(which)} AND (${id === "all"} OR id = ${id === "all" ? 0 : id})
          RETURNING id`
        if (rows.length > 0) yield* sql`SELECT pg_notify(${INBOX_CHANNEL}, '')`
        return rows.length
      }).pipe(Effect.catchTag("SqlError", unavailable))

    return { list, replay } as const
  })
}) {}
