import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { storageUnavailable } from "./storageUnavailable.js"

/** One denylist entry: a token by id, or every token of a user issued before a time. */
export type Revocation =
  | { readonly kind: "token"; readonly tokenId: string; readonly expiresAt: Date | null; readonly revokedAt: Date }
  | { readonly kind: "user"; readonly userId: string; readonly issuedBefore: Date; readonly revokedAt: Date }

interface Row {
  readonly token_id: string | null
  readonly user_id: string | null
  readonly issued_before: Date | null
  readonly expires_at: Date | null
  readonly revoked_at: Date
}

const toRevocation = (r: Row): Revocation =>
  r.token_id !== null
    ? { kind: "token", tokenId: r.token_id, expiresAt: r.expires_at, revokedAt: r.revoked_at }
    : { kind: "user", userId: r.user_id!, issuedBefore: r.issued_before!, revokedAt: r.revoked_at }

/**
 * The access-token denylist in PostgreSQL (migration 0017). Inserting a row notifies `token_revocations` (a trigger):
 * every runner's Revocations reads what is new at once.
 */
export class TokenDenylist extends Effect.Service<TokenDenylist>()("TokenDenylist", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /** Denies one token; false when it already was (the first row's who and why stay). */
    const revokeToken = (e: {
      readonly tokenId: string
      readonly expiresAt: Date | null
      readonly by: string
      readonly reason: string
    }) =>
      sql<{ id: number }>`
        INSERT INTO token_revocations (token_id, expires_at, revoked_by, reason)
        VALUES (${e.tokenId}, ${e.expiresAt}, ${e.by}, ${e.reason})
        ON CONFLICT (token_id) WHERE token_id IS NOT NULL DO NOTHING
        RETURNING id`.pipe(Effect.map((rows) => rows.length > 0))

    /** Denies every token of `userId` issued before `issuedBefore`. */
    const revokeUser = (e: {
      readonly userId: string
      readonly issuedBefore: Date
      readonly by: string
      readonly reason: string
    }) =>
      sql`
        INSERT INTO token_revocations (user_id, issued_before, revoked_by, reason)
        VALUES (${e.userId}, ${e.issuedBefore}, ${e.by}, ${e.reason})`.pipe(Effect.asVoid)

    /**
     * Entries revoked at or after `since` (all of them when null), except those whose token has expired anyway. A
     * user's entry is kept: its tokens' lifetimes are not known here.
     */
    const readSince = (since: Date | null) =>
      sql<Row>`
        SELECT token_id, user_id, issued_before, expires_at, revoked_at FROM token_revocations
        WHERE (${since}::timestamptz IS NULL OR revoked_at >= ${since})
          AND (expires_at IS NULL OR expires_at > now() - interval '10 minutes')
        ORDER BY revoked_at, id`.pipe(
        Effect.map((rows) => rows.map(toRevocation)),
        Effect.catchTag("SqlError", storageUnavailable("token denylist"))
      )

    return { revokeToken, revokeUser, readSince } as const
  })
}) {}
