import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Group commit: applies a JSON array of task changes, in array order, in the caller's one statement and so
 * one transaction — one round trip and one WAL flush for many entities' changes. Each element is exactly the
 * arguments of commit_task_change; results come back with the element's index. The caller orders elements by
 * project so that concurrent batches take stream locks in one global order.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql.unsafe(`
    CREATE FUNCTION commit_task_changes(p_batch jsonb)
    RETURNS TABLE (ord integer, fence_ok boolean, stream_epoch bigint, seq bigint)
    LANGUAGE plpgsql AS $fn$
    DECLARE
      c jsonb;
      r record;
    BEGIN
      ord := 0;
      FOR c IN SELECT value FROM jsonb_array_elements(p_batch) LOOP
        SELECT * INTO r FROM commit_task_change(
          c->>'region', (c->>'epoch')::bigint, (c->>'task_id')::uuid, (c->>'expected_version')::bigint,
          c->>'status', c->>'stage', (c->>'progress')::smallint, (c->>'version')::bigint,
          (c->>'current_attempt_id')::uuid, c->>'asset_id', c->>'error_code',
          (c->>'updated_at')::timestamptz, (c->>'terminal_at')::timestamptz,
          (c->>'attempt_id')::uuid, c->>'submit_state', c->>'provider_task_id', (c->>'last_provider_seq')::bigint,
          (c->>'last_provider_at')::timestamptz, (c->>'unknown_since')::timestamptz, c->'output_refs',
          (c->>'event_id')::uuid, c->>'event_type', c->'public_payload', c->>'source', c->>'trace_id',
          c->'domain_event');
        fence_ok := r.fence_ok;
        stream_epoch := r.stream_epoch;
        seq := r.seq;
        RETURN NEXT;
        ord := ord + 1;
      END LOOP;
    END
    $fn$`)
})
