import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { OperationRefused, StorageUnavailable } from "../../schema/errors.js"
import { OperatorAuthentication } from "./OperatorAuth.js"

/** One token by its id, or every token of a user issued before a time (now by default). */
export class RevokeBody extends Schema.Class<RevokeBody>("RevokeBody")({
  token_id: Schema.optional(Schema.UUID),
  user_id: Schema.optional(Schema.UUID),
  /** with user_id: tokens issued before this instant (default: now, i.e. every token the user holds) */
  issued_before: Schema.optional(Schema.DateTimeUtc),
  reason: Schema.Trim.pipe(Schema.minLength(1), Schema.maxLength(500))
}) {}

export class RevokeResult extends Schema.Class<RevokeResult>("RevokeResult")({
  kind: Schema.Literal("token", "user"),
  subject: Schema.String,
  /** false: this token was revoked already (nothing changed) */
  revoked: Schema.Boolean,
  issued_before: Schema.NullOr(Schema.Date)
}) {}

/** Access-token revocation (audited): every runner refuses the token within seconds and closes its open streams. */
export class TokensApi extends HttpApiGroup.make("tokens")
  .add(
    HttpApiEndpoint.post("revoke", "/admin/tokens/revoke").setPayload(RevokeBody).addSuccess(RevokeResult)
      .addError(OperationRefused).addError(StorageUnavailable)
  )
  .middleware(OperatorAuthentication)
  .annotate(OpenApi.Description, "Revoke access tokens: by id (jti) or all of a user's (operator token)")
{}
