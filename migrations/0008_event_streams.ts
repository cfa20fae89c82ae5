import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Browser delivery: a project's stream keeps events for a retention period; `retained_seq` is the last cursor
 * sequence that was forgotten, so a cursor behind it gets an explicit reset instead of a silent gap. Single-use
 * stream tokens are spent by inserting their id (the primary key refuses a second use, on every runner).
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE projects ADD COLUMN retained_seq BIGINT NOT NULL DEFAULT 0`
  // the retention sweep finds old events per project without scanning the whole table
  yield* sql`CREATE INDEX idx_task_events_created ON task_events (created_at)`
  yield* sql`
    CREATE TABLE spent_stream_tokens (
      token_id   UUID PRIMARY KEY,
      expires_at TIMESTAMPTZ NOT NULL
    )`
  yield* sql`CREATE INDEX idx_spent_stream_tokens_expiry ON spent_stream_tokens (expires_at)`
})
