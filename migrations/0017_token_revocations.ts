import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * The access-token denylist (issue #15): one token by its id (`jti`: an operator's `token revoke`, a logout), or every
 * token of a user issued before a time (`token revoke --user`). Every runner keeps the list in memory: a NOTIFY on
 * `token_revocations` tells them at once, a periodic read is the safety net (src/http/Revocations.ts). A token's row
 * is useless once the token would have expired anyway (`expires_at`, when known): the runners' read skips it.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE token_revocations (
      id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      token_id      UUID,
      user_id       UUID,
      issued_before TIMESTAMPTZ,
      expires_at    TIMESTAMPTZ,
      revoked_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
      revoked_by    TEXT        NOT NULL,
      reason        TEXT        NOT NULL,
      CONSTRAINT token_or_user CHECK (
        (token_id IS NOT NULL AND user_id IS NULL AND issued_before IS NULL) OR
        (token_id IS NULL AND user_id IS NOT NULL AND issued_before IS NOT NULL))
    )`
  // revoking a token twice is one row (the first's who and why stay)
  yield* sql`CREATE UNIQUE INDEX uq_token_revocations_token ON token_revocations (token_id) WHERE token_id IS NOT NULL`
  yield* sql`CREATE INDEX idx_token_revocations_revoked ON token_revocations (revoked_at)`
  yield* sql`
    CREATE FUNCTION notify_token_revocations() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
      PERFORM pg_notify('token_revocations', 'revoked');
      RETURN NULL;
    END
    $fn$`
  yield* sql`
    CREATE TRIGGER token_revocations_notify AFTER INSERT ON token_revocations
    FOR EACH STATEMENT EXECUTE FUNCTION notify_token_revocations()`
})
