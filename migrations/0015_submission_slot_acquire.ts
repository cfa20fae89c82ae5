import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * A submission slot is taken under a per-scope advisory lock (at most SUBMIT_CONCURRENCY per provider, model and
 * tenant). It was a transaction of four round trips (BEGIN, lock and check, count and insert, COMMIT), so the lock was
 * held for as long as the runner took between them: on a busy runner, tens of milliseconds. Every task of the scope
 * queued behind it, each holding a pooled connection while it waited, until the pool ran dry. Measured with
 * bench:polling: 1,310 of 2,500 tasks of one scope submitted in 300 s, and "Failed to acquire connection" everywhere
 * else. Here the whole step is one statement, so the lock is held only while PostgreSQL runs it.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE FUNCTION acquire_submission_slot(p_scope TEXT, p_attempt UUID, p_limit INTEGER) RETURNS BOOLEAN
    LANGUAGE plpgsql AS $$
    BEGIN
      PERFORM pg_advisory_xact_lock(hashtext(p_scope));
      IF EXISTS (SELECT 1 FROM submission_slots WHERE attempt_id = p_attempt) THEN
        RETURN TRUE;
      END IF;
      IF (SELECT count(*) FROM submission_slots WHERE scope = p_scope) >= p_limit THEN
        RETURN FALSE;
      END IF;
      INSERT INTO submission_slots (scope, attempt_id) VALUES (p_scope, p_attempt);
      RETURN TRUE;
    END
    $$`
})
