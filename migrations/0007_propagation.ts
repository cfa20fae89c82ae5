import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Event propagation: every insert into the outbox wakes the relay (one NOTIFY per statement; PostgreSQL collapses
 * repeats within a transaction), and notifications the dispatcher could not deliver are kept as dead letters to
 * list and replay.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql.unsafe(`
    CREATE FUNCTION notify_outbox() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
      -- a non-empty payload: the client library drops notifications without one
      PERFORM pg_notify('outbox_events', 'outbox');
      RETURN NULL;
    END
    $fn$`)
  yield* sql`
    CREATE TRIGGER outbox_events_notify AFTER INSERT ON outbox_events
    FOR EACH STATEMENT EXECUTE FUNCTION notify_outbox()`

  yield* sql`
    CREATE TABLE notification_dead_letters (
      id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      event_id    TEXT        NOT NULL UNIQUE,
      task_id     TEXT        NOT NULL,
      body        TEXT        NOT NULL,
      error       TEXT        NOT NULL,
      attempts    INTEGER     NOT NULL,
      created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
      replayed_at TIMESTAMPTZ
    )`
  yield* sql`
    CREATE INDEX idx_dead_letters_open ON notification_dead_letters (created_at) WHERE replayed_at IS NULL`
})
