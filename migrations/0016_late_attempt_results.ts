import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Late results of superseded attempts (seed 12.7.3, issue #15): a terminal result (succeeded, failed, canceled) of an
 * attempt that is no longer its task's current one never changes the task, but the provider may have done (and
 * billed) the work, so it is kept for cost reconciliation: once per attempt and status, whatever the number of
 * deliveries (webhook duplicates, a poll and a webhook of the same end).
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE late_attempt_results (
      id                   BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      task_id              UUID        NOT NULL REFERENCES generation_tasks (id),
      attempt_id           UUID        NOT NULL REFERENCES task_attempts (id),
      attempt_no           INTEGER     NOT NULL,
      provider             TEXT        NOT NULL,
      provider_task_id     TEXT,
      model                TEXT        NOT NULL,
      status               TEXT        NOT NULL CHECK (status IN ('succeeded', 'failed', 'canceled')),
      error_class          TEXT,
      error_code           TEXT,
      output_refs          JSONB       NOT NULL DEFAULT '[]',
      source               TEXT        NOT NULL,
      provider_occurred_at TIMESTAMPTZ,
      received_at          TIMESTAMPTZ NOT NULL,
      recorded_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
      trace_id             TEXT        NOT NULL,
      CONSTRAINT uq_late_attempt_status UNIQUE (attempt_id, status)
    )`
  // listed for reconciliation by time, optionally by provider
  yield* sql`CREATE INDEX idx_late_attempt_results_received ON late_attempt_results (received_at, id)`
})
