import * as HttpApiMiddleware from "@effect/platform/HttpApiMiddleware"
import * as HttpApiSecurity from "@effect/platform/HttpApiSecurity"
import { Context, Effect, Layer, Redacted } from "effect"
import { Unauthorized } from "../../schema/errors.js"
import { TokenSigner } from "../Auth.js"

/** Who is operating: the subject of an operator token (written into audit rows). */
export class Operator extends Context.Tag("Operator")<Operator, { readonly operator: string }>() {}

/**
 * The admin API takes operator tokens only (`typ` ops+jwt, its own audience): a tenant's token is refused here, and an
 * operator's token is refused by the tenants' API. Bearer only: no cookie, so no cross-site request can use it.
 */
export class OperatorAuthentication extends HttpApiMiddleware.Tag<OperatorAuthentication>()("OperatorAuthentication", {
  failure: Unauthorized,
  provides: Operator,
  security: { bearer: HttpApiSecurity.bearer }
}) {}

export const OperatorAuthenticationLive = Layer.effect(
  OperatorAuthentication,
  Effect.map(TokenSigner, (signer) => ({
    bearer: (token: Redacted.Redacted<string>) => signer.verifyOperator(Redacted.value(token))
  }))
)
