import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * The facts of DESIGN §5. Cluster tables (cluster_*) are created by @effect/cluster itself.
 * Every sweep has a partial index, so sweeps stay cheap however large the history grows.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient

  // Application-level write fencing (seed 19.5.5): one row per resource scope.
  yield* sql`
    CREATE TABLE region_write_fence (
      resource_scope TEXT PRIMARY KEY,
      active_region  TEXT        NOT NULL,
      write_epoch    BIGINT      NOT NULL CHECK (write_epoch >= 1),
      mode           TEXT        NOT NULL CHECK (mode IN ('NORMAL', 'DEGRADED_NOTIFY', 'DEGRADED_PROVIDER',
                                   'QUEUE_ONLY', 'RECONCILE_ONLY', 'READ_ONLY', 'MAINTENANCE')),
      updated_at     TIMESTAMPTZ NOT NULL DEFAULT now()
    )`

  // A project owns one event stream. last_seq is bumped by every task event of the project inside the
  // event's own transaction: the row lock orders commits, so seq order == commit order and has no gaps.
  yield* sql`
    CREATE TABLE projects (
      project_id   UUID PRIMARY KEY,
      tenant_id    UUID        NOT NULL,
      stream_epoch BIGINT      NOT NULL,
      last_seq     BIGINT      NOT NULL DEFAULT 0,
      created_at   TIMESTAMPTZ NOT NULL DEFAULT now()
    )`

  yield* sql`
    CREATE TABLE generation_tasks (
      id                 UUID PRIMARY KEY,
      tenant_id          UUID        NOT NULL,
      project_id         UUID        NOT NULL REFERENCES projects (project_id),
      user_id            UUID        NOT NULL,
      idempotency_key    TEXT        NOT NULL,
      request_hash       TEXT        NOT NULL,
      request            JSONB       NOT NULL,
      status             TEXT        NOT NULL,
      stage              TEXT        NOT NULL,
      progress           SMALLINT CHECK (progress BETWEEN 0 AND 100),
      version            BIGINT      NOT NULL DEFAULT 0,
      last_seq           BIGINT      NOT NULL,
      current_attempt_id UUID,
      home_region        TEXT        NOT NULL,
      write_epoch        BIGINT      NOT NULL,
      asset_id           TEXT,
      error_code         TEXT,
      created_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
      updated_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
      terminal_at        TIMESTAMPTZ,
      CONSTRAINT uq_task_idempotency UNIQUE (tenant_id, idempotency_key)
    )`
  yield* sql`CREATE INDEX idx_tasks_project_created ON generation_tasks (project_id, created_at DESC, id)`
  yield* sql`
    CREATE INDEX idx_tasks_non_terminal ON generation_tasks (status, updated_at)
    WHERE terminal_at IS NULL`

  yield* sql`
    CREATE TABLE task_attempts (
      id                 UUID PRIMARY KEY,
      task_id            UUID        NOT NULL REFERENCES generation_tasks (id),
      attempt_no         INTEGER     NOT NULL,
      provider           TEXT        NOT NULL,
      model              TEXT        NOT NULL,
      client_request_id  TEXT        NOT NULL,
      provider_task_id   TEXT,
      submit_state       TEXT        NOT NULL,
      last_provider_seq  BIGINT,
      last_provider_at   TIMESTAMPTZ,
      next_poll_at       TIMESTAMPTZ,
      last_polled_at     TIMESTAMPTZ,
      poll_failures      INTEGER     NOT NULL DEFAULT 0,
      poll_lease_until   TIMESTAMPTZ,
      submit_started_at  TIMESTAMPTZ,
      unknown_since      TIMESTAMPTZ,
      output_deadline_at TIMESTAMPTZ,
      output_refs        JSONB       NOT NULL DEFAULT '[]',
      created_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
      updated_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
      CONSTRAINT uq_task_attempt_no UNIQUE (task_id, attempt_no),
      CONSTRAINT uq_provider_task UNIQUE (provider, provider_task_id),
      CONSTRAINT uq_client_request UNIQUE (provider, client_request_id)
    )`
  yield* sql`
    CREATE INDEX idx_attempt_poll_due ON task_attempts (next_poll_at)
    WHERE submit_state IN ('SUBMITTED', 'RUNNING', 'SUBMIT_UNKNOWN')`
  yield* sql`
    CREATE INDEX idx_attempt_submit_unknown ON task_attempts (unknown_since)
    WHERE submit_state = 'SUBMIT_UNKNOWN'`
  yield* sql`
    CREATE INDEX idx_attempt_output_deadline ON task_attempts (output_deadline_at)
    WHERE submit_state = 'SUCCEEDED' AND output_deadline_at IS NOT NULL`

  yield* sql`
    CREATE TABLE provider_callback_inbox (
      id                    BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      provider              TEXT        NOT NULL,
      dedup_key             TEXT        NOT NULL,
      provider_event_id     TEXT,
      provider_task_id      TEXT,
      client_request_id     TEXT,
      provider_occurred_at  TIMESTAMPTZ,
      received_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
      signature_key_version TEXT,
      payload_hash          BYTEA       NOT NULL,
      payload               JSONB,
      process_status        TEXT        NOT NULL DEFAULT 'pending'
                            CHECK (process_status IN ('pending', 'retry', 'processed', 'orphan', 'dead')),
      retry_count           INTEGER     NOT NULL DEFAULT 0,
      next_retry_at         TIMESTAMPTZ,
      last_error_code       TEXT,
      processed_at          TIMESTAMPTZ,
      CONSTRAINT uq_provider_callback_dedup UNIQUE (provider, dedup_key)
    )`
  yield* sql`
    CREATE INDEX idx_callback_inbox_pending ON provider_callback_inbox (next_retry_at, id)
    WHERE process_status IN ('pending', 'retry', 'orphan')`

  // cursor_seq is the task's position in its project's stream; (project_id, cursor_seq) is the replay key.
  yield* sql`
    CREATE TABLE task_events (
      event_id       UUID PRIMARY KEY,
      tenant_id      UUID        NOT NULL,
      project_id     UUID        NOT NULL,
      task_id        UUID        NOT NULL REFERENCES generation_tasks (id),
      attempt_id     UUID,
      task_version   BIGINT      NOT NULL,
      stream_epoch   BIGINT      NOT NULL,
      cursor_seq     BIGINT      NOT NULL,
      event_type     TEXT        NOT NULL,
      public_payload JSONB       NOT NULL,
      source         TEXT        NOT NULL,
      trace_id       TEXT        NOT NULL,
      created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
      CONSTRAINT uq_task_version UNIQUE (task_id, task_version),
      CONSTRAINT uq_project_cursor UNIQUE (project_id, cursor_seq)
    )`

  yield* sql`
    CREATE TABLE outbox_events (
      id                BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      event_id          UUID        NOT NULL UNIQUE,
      aggregate_type    TEXT        NOT NULL,
      aggregate_id      UUID        NOT NULL,
      aggregate_version BIGINT      NOT NULL,
      event_type        TEXT        NOT NULL,
      payload           JSONB       NOT NULL,
      home_region       TEXT        NOT NULL,
      write_epoch       BIGINT      NOT NULL,
      publish_attempts  INTEGER     NOT NULL DEFAULT 0,
      next_retry_at     TIMESTAMPTZ,
      created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
      published_at      TIMESTAMPTZ,
      CONSTRAINT uq_outbox_aggregate_version UNIQUE (aggregate_type, aggregate_id, aggregate_version, event_type)
    )`
  yield* sql`
    CREATE INDEX idx_outbox_unpublished ON outbox_events (next_retry_at, id)
    WHERE published_at IS NULL`

  yield* sql`
    CREATE TABLE credit_ledger (
      id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      tenant_id   UUID          NOT NULL,
      task_id     UUID          NOT NULL REFERENCES generation_tasks (id),
      attempt_id  UUID,
      ledger_type TEXT          NOT NULL CHECK (ledger_type IN ('reserve', 'settle', 'refund')),
      amount      NUMERIC(18,6) NOT NULL CHECK (amount >= 0),
      created_at  TIMESTAMPTZ   NOT NULL DEFAULT now()
    )`
  // NULL attempt ids (the reserve is taken before any attempt exists) must still be unique per task.
  yield* sql`
    CREATE UNIQUE INDEX uq_credit_ledger_business_key
    ON credit_ledger (task_id, COALESCE(attempt_id, '00000000-0000-0000-0000-000000000000'::uuid), ledger_type)`
  yield* sql`
    CREATE INDEX idx_credit_ledger_task ON credit_ledger (task_id)`

  yield* sql`
    CREATE TABLE task_operations (
      id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      task_id        UUID        NOT NULL REFERENCES generation_tasks (id),
      attempt_id     UUID        NOT NULL,
      operation_type TEXT        NOT NULL,
      status         TEXT        NOT NULL DEFAULT 'pending',
      attempts       INTEGER     NOT NULL DEFAULT 0,
      next_run_at    TIMESTAMPTZ,
      deadline_at    TIMESTAMPTZ,
      result         JSONB,
      last_error     TEXT,
      created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
      updated_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
      CONSTRAINT uq_task_operation UNIQUE (task_id, attempt_id, operation_type)
    )`
  yield* sql`
    CREATE INDEX idx_task_operations_due ON task_operations (deadline_at, next_run_at)
    WHERE status IN ('pending', 'retry')`

  // Contradictory terminals and ignored facts worth a human's or a reconciler's look (seed 12.7.7).
  yield* sql`
    CREATE TABLE task_reconciliations (
      id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      task_id      UUID        NOT NULL REFERENCES generation_tasks (id),
      attempt_id   UUID,
      reason       TEXT        NOT NULL,
      dedup_key    TEXT        NOT NULL,
      observation  JSONB       NOT NULL,
      resolved_at  TIMESTAMPTZ,
      created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
      CONSTRAINT uq_reconciliation UNIQUE (task_id, dedup_key)
    )`
  yield* sql`
    CREATE INDEX idx_reconciliations_open ON task_reconciliations (created_at)
    WHERE resolved_at IS NULL`
})
