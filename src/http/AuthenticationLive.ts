import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import { Effect, Layer, Metric, Redacted } from "effect"
import { Unauthorized } from "../schema/errors.js"
import { Authentication, OriginPolicy, type Principal, TokenSigner, tokensRefused } from "./Auth.js"
import { Revocations } from "./Revocations.js"

/** A verified access token that the denylist names is refused like any other bad token (401), and counted. */
export const refuseRevoked = (
  revocations: Revocations,
  principal: Principal["Type"]
): Effect.Effect<Principal["Type"], Unauthorized> =>
  revocations.isRevoked(principal)
    ? Effect.logDebug("token refused").pipe(
      Effect.annotateLogs({ token_kind: "access", reason: "revoked" }),
      Effect.zipRight(Metric.increment(
        Metric.tagged(Metric.tagged(tokensRefused, "kind", "access"), "reason", "revoked")
      )),
      Effect.zipRight(Effect.fail(new Unauthorized({ message: "this token was revoked" })))
    )
    : Effect.succeed(principal)

/** The API's authentication (Auth.ts): bearer or session cookie (from an allowed Origin), verified, not revoked. */
export const AuthenticationLive = Layer.effect(
  Authentication,
  Effect.gen(function*() {
    const signer = yield* TokenSigner
    const origins = yield* OriginPolicy
    const revocations = yield* Revocations
    const verify = (token: string) =>
      Effect.flatMap(signer.verify(token), (principal) => refuseRevoked(revocations, principal))
    return {
      bearer: (token: Redacted.Redacted<string>) => verify(Redacted.value(token)),
      cookie: (token: Redacted.Redacted<string>) =>
        Effect.gen(function*() {
          const request = yield* HttpServerRequest.HttpServerRequest
          if (!origins.accepts(request.headers["origin"], request.headers["host"])) {
            return yield* new Unauthorized({ message: "cross-origin request with a session cookie" })
          }
          return yield* verify(Redacted.value(token))
        })
    }
  })
)
