import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * The verified body as received (text). jsonb refuses some valid JSON (\u0000, lone surrogates) and rounds
 * big integers; the processor reads this column, and `payload` (jsonb, for queries) is left NULL when the
 * body cannot be represented there — so no valid callback is refused for how PostgreSQL stores JSON.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE provider_callback_inbox ADD COLUMN body TEXT`
})
