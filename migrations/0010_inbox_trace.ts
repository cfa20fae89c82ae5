import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * The trace id of the webhook request that stored a callback: the processor applies the callback under it, so the
 * task event it causes (task_events.trace_id), its SSE frame and every log line of that work name the request.
 * Rows stored before this column have none: the processor gives them a trace id of their own.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE provider_callback_inbox ADD COLUMN trace_id TEXT`
})
