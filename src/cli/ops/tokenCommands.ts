import { Args, Command, Options } from "@effect/cli"
import { Console, DateTime, Effect, Option, Schema } from "effect"
import { AdminClient } from "./AdminClient.js"

const isUuid = Schema.is(Schema.UUID)

/**
 * `npm run ops -- token revoke <jti> --reason …` or `token revoke --user <id> [--before ISO] --reason …`: every runner
 * refuses the token(s) within seconds and closes the SSE and WebSocket streams they hold (audited).
 */
const revoke = Command.make("revoke", {
  tokenId: Args.text({ name: "jti" }).pipe(
    Args.optional,
    Args.withDescription("the access token's id (its jti claim)")
  ),
  user: Options.text("user").pipe(
    Options.optional,
    Options.withDescription("revoke every token of this user id instead (issued before --before, default now)")
  ),
  before: Options.text("before").pipe(
    Options.optional,
    Options.withDescription("with --user: only tokens issued before this ISO 8601 time")
  ),
  reason: Options.text("reason").pipe(
    Options.withDescription("why: written into the audit row with your operator name (required)")
  )
}, ({ before, reason, tokenId, user }) =>
  Effect.gen(function*() {
    const client = yield* AdminClient
    if (Option.isSome(tokenId) === Option.isSome(user)) {
      return yield* Effect.fail(new Error("name a token id (jti) or --user, not both"))
    }
    if (Option.isSome(tokenId) && !isUuid(tokenId.value)) {
      return yield* Effect.fail(new Error(`not a token id: ${tokenId.value}`))
    }
    if (Option.isSome(user) && !isUuid(user.value)) return yield* Effect.fail(new Error(`not a user id: ${user.value}`))
    if (Option.isSome(before) && Option.isSome(tokenId)) {
      return yield* Effect.fail(new Error("--before goes with --user"))
    }
    let issuedBefore: DateTime.Utc | undefined
    if (Option.isSome(before)) {
      const parsed = DateTime.make(before.value)
      if (Option.isNone(parsed)) return yield* Effect.fail(new Error(`not an ISO 8601 time: ${before.value}`))
      issuedBefore = parsed.value
    }
    const r = yield* client.tokens.revoke({
      payload: {
        reason,
        ...(Option.isSome(tokenId) ? { token_id: tokenId.value } : {}),
        ...(Option.isSome(user) ? { user_id: user.value } : {}),
        ...(issuedBefore === undefined ? {} : { issued_before: issuedBefore })
      }
    })
    yield* Console.log(
      r.kind === "token"
        ? `token ${r.subject} ${r.revoked ? "revoked" : "was already revoked"}`
        : `every token of user ${r.subject} issued before ${r.issued_before!.toISOString()} revoked`
    )
  })).pipe(Command.withDescription("revoke an access token, or all of a user's: refused and its streams closed"))

export const token = Command.make("token").pipe(
  Command.withDescription("access tokens"),
  Command.withSubcommands([revoke])
)
