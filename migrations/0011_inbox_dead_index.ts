import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Dead inbox rows are counted by every runner's metrics sampler (src/persistence/MetricsSampler.ts) and listed by
 * operators: a partial index keeps both off the processed rows, which are nearly all of the table.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE INDEX idx_callback_inbox_dead ON provider_callback_inbox (id) WHERE process_status = 'dead'`
})
