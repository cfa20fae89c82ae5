import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { SqlClient } from "@effect/sql"
import { DateTime, Effect } from "effect"
import { OperatorAudit } from "../../persistence/OperatorAudit.js"
import { TokenDenylist } from "../../persistence/TokenDenylist.js"
import { OperationRefused, StorageUnavailable } from "../../schema/errors.js"
import { trusted } from "../../schema/task.js"
import { ControlPlaneApi } from "../Api.js"
import { Revocations } from "../Revocations.js"
import { Operator } from "./OperatorAuth.js"
import { RevokeResult } from "./TokensApi.js"

/**
 * The tokens group (src/http/admin/TokensApi.ts): the denylist row and its audit row in one transaction; this runner
 * applies it at once, the others on the NOTIFY (or their next refresh).
 */
export const TokensHttpLive = HttpApiBuilder.group(ControlPlaneApi, "tokens", (handlers) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const denylist = yield* TokenDenylist
    const audit = yield* OperatorAudit
    const revocations = yield* Revocations
    const failed = (cause: unknown) =>
      Effect.zipRight(
        Effect.logError("revoking a token failed", cause),
        Effect.fail(new StorageUnavailable({ message: "revoking failed: retry later" }))
      )
    return handlers.handle("revoke", ({ payload }) =>
      Effect.gen(function*() {
        const { operator } = yield* Operator
        if ((payload.token_id === undefined) === (payload.user_id === undefined)) {
          return yield* new OperationRefused({ message: "name either token_id or user_id" })
        }
        if (payload.token_id !== undefined) {
          if (payload.issued_before !== undefined) {
            return yield* new OperationRefused({ message: "issued_before goes with user_id only" })
          }
          const tokenId = payload.token_id
          const fresh = yield* sql.withTransaction(
            Effect.tap(
              denylist.revokeToken({ tokenId, expiresAt: null, by: operator, reason: payload.reason }),
              (fresh) =>
                fresh
                  ? audit.record({
                    operator,
                    what: "token.revoke",
                    subject: tokenId,
                    from: null,
                    to: "revoked",
                    reason: payload.reason
                  })
                  : Effect.void
            )
          ).pipe(Effect.catchAll(failed))
          yield* revocations.revoked({ kind: "token", tokenId, expiresAt: null, revokedAt: new Date() }, "ops")
          yield* Effect.logInfo(`token ${fresh ? "revoked" : "was already revoked"} by ${operator}`).pipe(
            Effect.annotateLogs({ token_id: tokenId, reason: payload.reason })
          )
          return new RevokeResult({ kind: "token", subject: tokenId, revoked: fresh, issued_before: null }, trusted)
        }
        const userId = payload.user_id!
        const before = payload.issued_before === undefined ? new Date() : DateTime.toDateUtc(payload.issued_before)
        yield* sql.withTransaction(Effect.zipRight(
          denylist.revokeUser({ userId, issuedBefore: before, by: operator, reason: payload.reason }),
          audit.record({
            operator,
            what: "token.revoke_user",
            subject: userId,
            from: null,
            to: `issued before ${before.toISOString()}`,
            reason: payload.reason
          })
        )).pipe(Effect.catchAll(failed))
        yield* revocations.revoked({ kind: "user", userId, issuedBefore: before, revokedAt: new Date() }, "ops")
        yield* Effect.logInfo(`every token of a user issued before ${before.toISOString()} revoked by ${operator}`)
          .pipe(Effect.annotateLogs({ user_id: userId, reason: payload.reason }))
        return new RevokeResult({ kind: "user", subject: userId, revoked: true, issued_before: before }, trusted)
      }))
  }))
