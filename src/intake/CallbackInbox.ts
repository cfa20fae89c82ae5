import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { StorageUnavailable } from "../schema/errors.js"

export const INBOX_CHANNEL = "provider_inbox"

export interface InboxEntry {
  readonly provider: string
  readonly dedupKey: string
  readonly providerEventId: string | null
  readonly providerTaskId: string | null
  readonly clientRequestId: string | null
  readonly attemptId: string | null
  readonly providerOccurredAt: Date | null
  readonly signatureKeyVersion: string
  readonly payloadHash: string
  readonly payload: unknown
}

/**
 * The durable record of every verified callback. `store` answers only after the row (or its earlier
 * duplicate) is committed; the same statement NOTIFYs the processors, delivered at commit.
 */
export class CallbackInbox extends Effect.Service<CallbackInbox>()("CallbackInbox", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const store = Effect.fn("CallbackInbox.store")(function*(e: InboxEntry) {
      const rows = yield* sql<{ id: number }>`
        WITH ins AS (
          INSERT INTO provider_callback_inbox (provider, dedup_key, provider_event_id, provider_task_id,
            client_request_id, attempt_id, provider_occurred_at, signature_key_version, payload_hash, payload)
          VALUES (${e.provider}, ${e.dedupKey}, ${e.providerEventId}, ${e.providerTaskId}, ${e.clientRequestId},
            ${e.attemptId}, ${e.providerOccurredAt}, ${e.signatureKeyVersion}, decode(${e.payloadHash}, 'hex'),
            ${JSON.stringify(e.payload)}::jsonb)
          ON CONFLICT (provider, dedup_key) DO NOTHING
          RETURNING id
        )
        SELECT id, pg_notify(${INBOX_CHANNEL}, id::text) FROM ins`
      return rows.length > 0 ? "stored" as const : "duplicate" as const
    }, Effect.catchTag("SqlError", (e) =>
      Effect.logError("inbox write failed", e).pipe(
        Effect.zipRight(Effect.fail(new StorageUnavailable({ message: "the inbox is unavailable: retry later" })))
      )))

    return { store } as const
  })
}) {}
