import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Operating the cluster (issue #13):
 * - DEGRADED_PROVIDER names its providers: `region_write_fence.degraded_providers`;
 * - every change of mode, epoch or active region, and every operator resolution, leaves an `operator_audit` row
 *   (who, when, what, from → to, why);
 * - commit_task_change frees the task's submission slots when it goes to manual_review, not only when it ends.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient

  yield* sql`ALTER TABLE region_write_fence ADD COLUMN degraded_providers TEXT[] NOT NULL DEFAULT '{}'`

  yield* sql`
    CREATE TABLE operator_audit (
      id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      at         TIMESTAMPTZ NOT NULL DEFAULT now(),
      operator   TEXT        NOT NULL,
      what       TEXT        NOT NULL,
      subject    TEXT,
      from_value TEXT,
      to_value   TEXT,
      reason     TEXT        NOT NULL
    )`
  yield* sql`CREATE INDEX idx_operator_audit_at ON operator_audit (at DESC, id DESC)`

  // the review queue is read by the operator page and the CLI page by page, oldest first
  yield* sql`
    CREATE INDEX idx_tasks_manual_review ON generation_tasks (updated_at, id)
    WHERE status = 'manual_review'`

  yield* sql.unsafe(`
    CREATE OR REPLACE FUNCTION commit_task_change(c jsonb, OUT fence_ok boolean, OUT stream_epoch bigint, OUT seq bigint)
    LANGUAGE plpgsql AS $fn$
    DECLARE
      v_project uuid;
      v_tenant uuid;
      v_task uuid := (c->>'task_id')::uuid;
      v_attempt uuid := (c->>'attempt_id')::uuid;
      v_status text := c->>'status';
      v_version bigint := (c->>'version')::bigint;
      v_epoch bigint := (c->>'epoch')::bigint;
      v_region text := c->>'region';
      v_at timestamptz := (c->>'updated_at')::timestamptz;
    BEGIN
      -- FOR SHARE: an operator's fence change waits for writers in flight, and writers after it see it
      PERFORM 1 FROM region_write_fence f
      WHERE f.resource_scope = 'global' AND f.active_region = v_region AND f.write_epoch = v_epoch
        AND f.mode NOT IN ('READ_ONLY', 'MAINTENANCE')
      FOR SHARE;
      fence_ok := FOUND;
      IF NOT fence_ok THEN RETURN; END IF;

      SELECT t.project_id, t.tenant_id INTO v_project, v_tenant FROM generation_tasks t
      WHERE t.id = v_task AND t.version = (c->>'expected_version')::bigint AND t.write_epoch <= v_epoch
      FOR UPDATE;
      IF NOT FOUND THEN RETURN; END IF;

      UPDATE projects p SET last_seq = p.last_seq + 1 WHERE p.project_id = v_project
      RETURNING p.stream_epoch, p.last_seq INTO stream_epoch, seq;

      IF (c->>'new_attempt')::boolean THEN
        -- a retried submission: the new attempt replaces every live one of the task
        DELETE FROM submission_slots s USING task_attempts a
        WHERE s.attempt_id = a.id AND a.task_id = v_task AND a.id <> v_attempt;
        UPDATE task_attempts a SET submit_state = 'REJECTED', updated_at = v_at
        WHERE a.task_id = v_task AND a.id <> v_attempt
          AND a.submit_state IN ('PREPARED', 'SUBMITTING', 'SUBMIT_UNKNOWN');
        INSERT INTO task_attempts (id, task_id, attempt_no, provider, model, client_request_id, submit_state,
          next_poll_at)
        VALUES (v_attempt, v_task, (c->>'attempt_no')::int, c->>'provider', c->>'model', c->>'client_request_id',
          c->>'submit_state', NULL);
      END IF;

      UPDATE generation_tasks t SET
        status = v_status, stage = c->>'stage', progress = (c->>'progress')::smallint, version = v_version,
        current_attempt_id = (c->>'current_attempt_id')::uuid, asset_id = c->>'asset_id',
        error_code = c->>'error_code', home_region = v_region, write_epoch = v_epoch, last_seq = seq,
        updated_at = v_at, terminal_at = (c->>'terminal_at')::timestamptz
      WHERE t.id = v_task;

      IF v_attempt IS NOT NULL THEN
        UPDATE task_attempts a SET
          submit_state = c->>'submit_state', provider_task_id = c->>'provider_task_id',
          last_provider_seq = (c->>'last_provider_seq')::bigint,
          last_provider_at = (c->>'last_provider_at')::timestamptz,
          unknown_since = (c->>'unknown_since')::timestamptz, output_refs = c->'output_refs',
          submit_started_at = (c->>'submit_started_at')::timestamptz,
          output_deadline_at = (c->>'output_deadline_at')::timestamptz,
          -- a fresh provider job is polled soon; the poller keeps its own schedule afterwards
          next_poll_at = CASE WHEN a.next_poll_at IS NULL AND c->>'provider_task_id' IS NOT NULL
                              THEN v_at + interval '2 seconds' ELSE a.next_poll_at END,
          updated_at = v_at
        WHERE a.id = v_attempt;
        IF c->>'submit_state' IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'REJECTED') THEN
          DELETE FROM submission_slots WHERE attempt_id = v_attempt;
        END IF;
      END IF;

      -- a task waiting for a human holds no submission slot (an unknown submit there used to keep its slot until
      -- someone resolved it, so SUBMIT_CONCURRENCY shrank with every task sent to review)
      IF v_status IN ('ready', 'failed', 'canceled', 'manual_review') THEN
        DELETE FROM submission_slots s USING task_attempts a WHERE s.attempt_id = a.id AND a.task_id = v_task;
      END IF;

      IF v_status IN ('ready', 'failed', 'canceled') THEN
        -- the reserve's settlement, in the terminal commit itself: exactly one per task
        INSERT INTO credit_ledger (tenant_id, task_id, attempt_id, ledger_type, amount)
        SELECT v_tenant, v_task, (c->>'current_attempt_id')::uuid,
          CASE WHEN v_status = 'ready' THEN 'settle' ELSE 'refund' END, r.amount
        FROM credit_ledger r WHERE r.task_id = v_task AND r.ledger_type = 'reserve'
        ON CONFLICT DO NOTHING;
      END IF;

      INSERT INTO task_events (event_id, tenant_id, project_id, task_id, attempt_id, task_version, stream_epoch,
        cursor_seq, event_type, public_payload, source, trace_id, created_at)
      VALUES ((c->>'event_id')::uuid, v_tenant, v_project, v_task, (c->>'current_attempt_id')::uuid, v_version,
        stream_epoch, seq, c->>'event_type', c->'public_payload', c->>'source', c->>'trace_id', v_at);

      INSERT INTO outbox_events (event_id, aggregate_type, aggregate_id, aggregate_version, event_type, payload,
        home_region, write_epoch, created_at)
      VALUES ((c->>'event_id')::uuid, 'generation_task', v_task, v_version, c->>'event_type',
        (c->'domain_event') || jsonb_build_object('cursor', stream_epoch || '-' || seq),
        v_region, v_epoch, v_at);
    END
    $fn$`)
})
