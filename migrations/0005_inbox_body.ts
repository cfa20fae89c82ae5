import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * The verified body as received (text). jsonb refuses some valid JSON (\u0000, lone surrogates) and rounds
 * big integers; the processor reads this column, and `payload` (jsonb, for queries) is left NULL when the
 * body cannot be represented there — so no valid callback is refused for how PostgreSQL stores JSON.
 * Bodies of processed rows are dropped after a retention period; the row (and its dedup key) stays.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE provider_callback_inbox ADD COLUMN body TEXT`
  // the retention sweep: processed rows whose body (temporary URLs, provider details) is still kept
  yield* sql`
    CREATE INDEX idx_callback_inbox_retention ON provider_callback_inbox (processed_at)
    WHERE process_status = 'processed' AND body IS NOT NULL`
})
