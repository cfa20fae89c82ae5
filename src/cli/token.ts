import { NodeRuntime } from "@effect/platform-node"
import { Console, Effect, Logger, LogLevel, Schema } from "effect"
import * as jose from "jose"
import { parseArgs } from "node:util"
import { TokenSigner } from "../http/Auth.js"
import { ProjectId, TenantId, UserId } from "../schema/ids.js"

/**
 * Prints a bearer token signed with AUTH_SECRET, for trying the API by hand:
 *   npm run token -- --tenant <uuid> --project <uuid> [--project <uuid> ...] [--user <uuid>] [--ttl 3600]
 * Without --project the token covers every project of the tenant.
 *   npm run token -- --operator NAME [--ttl 3600]
 * An operator token for the admin API and the operator page (`NAME` is written into audit rows).
 */
const Args = Schema.Struct({
  tenant: TenantId,
  project: Schema.optionalWith(Schema.Array(ProjectId), { default: () => [] }),
  user: Schema.optionalWith(UserId, { default: () => crypto.randomUUID() as UserId }),
  ttl: Schema.optionalWith(Schema.NumberFromString.pipe(Schema.int(), Schema.positive()), { default: () => 3600 }),
  operator: Schema.optional(Schema.NonEmptyTrimmedString)
})

const program = Effect.gen(function*() {
  const { values } = parseArgs({
    options: {
      tenant: { type: "string", default: crypto.randomUUID() },
      project: { type: "string", multiple: true },
      user: { type: "string" },
      ttl: { type: "string" },
      operator: { type: "string" }
    }
  })
  const args = yield* Schema.decodeUnknown(Args)(values)
  const signer = yield* TokenSigner
  if (args.operator !== undefined) return yield* Console.log(yield* signer.signOperator(args.operator, args.ttl))
  const token = yield* signer.sign(
    { tenant_id: args.tenant, sub: args.user, projects: args.project.length === 0 ? "*" : args.project },
    args.ttl
  )
  yield* Console.log(token)
  // the token's id, for `npm run ops -- token revoke <jti>` (on stderr: stdout stays the token alone, for $(...))
  yield* Console.error(`jti ${jose.decodeJwt(token).jti}`)
})

program.pipe(
  Effect.provide(TokenSigner.Default),
  Effect.provide(Logger.minimumLogLevel(LogLevel.Error)),
  NodeRuntime.runMain
)
