import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Callbacks authenticated by a per-attempt URL token name their attempt directly. New rows are due at once
 * (next_retry_at = received time), so the pending sweep is one range scan of its partial index.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE provider_callback_inbox ADD COLUMN attempt_id UUID`
  yield* sql`ALTER TABLE provider_callback_inbox ALTER COLUMN next_retry_at SET DEFAULT now()`
  yield* sql`UPDATE provider_callback_inbox SET next_retry_at = received_at
             WHERE next_retry_at IS NULL AND process_status IN ('pending', 'retry', 'orphan')`
  yield* sql`ALTER TABLE provider_callback_inbox ADD COLUMN last_error TEXT`
})
