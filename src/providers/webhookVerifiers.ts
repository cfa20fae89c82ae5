import { Duration, Effect, Either, Option, Redacted } from "effect"
import * as S from "../config/Settings.js"
import {
  constant,
  mapVerification,
  type Verify,
  type WebhookContext,
  type WebhookDefinition,
  type WebhookRequest
} from "./ProviderDefinition.js"
import { verifyCallbackToken, verifyStandardWebhook, type VersionedSecret } from "./signatures.js"

/** A secret and the one it replaces (kept during a rotation): both verify. */
export const secretPair = (name: string, what: string): S.Setting<ReadonlyArray<VersionedSecret>> =>
  S.map(
    S.all({
      current: S.secret(name, what),
      previous: S.secret(`${name}_PREVIOUS`, `The previous ${what}, accepted during a rotation`)
    }),
    ({ current, previous }) => [
      ...Option.toArray(Option.map(current, (s) => ({ version: "current", secret: Redacted.value(s) }))),
      ...Option.toArray(Option.map(previous, (s) => ({ version: "previous", secret: Redacted.value(s) })))
    ]
  )

/** Standard Webhooks (OpenAI, Replicate): HMAC over id.timestamp.body with a whsec_ secret. */
export const standardWebhooks = (secretName: string, title: string): WebhookDefinition["verifier"] =>
  S.map(
    secretPair(secretName, `${title} webhook signing secret (whsec_…); unset, ${title} webhooks are refused (404)`),
    (configured) => ({ toleranceSeconds, usable }) => {
      const secrets = usable(configured)
      return secrets.length === 0 ?
        Option.none() :
        Option.some(
          Effect.succeed((r, now) =>
            verifyStandardWebhook({ secrets, headers: r.headers, body: r.body, now, toleranceSeconds })
          )
        )
    }
  )

/** The attempt token of a callback URL (`attempt`, `issued`, `token` in its query), checked with `secrets`. */
const urlToken = (
  provider: string,
  secrets: ReadonlyArray<VersionedSecret>,
  { callbackTokenTtl, toleranceSeconds }: WebhookContext
) =>
(r: WebhookRequest, now: Date) =>
  verifyCallbackToken({
    secrets,
    provider,
    attemptId: r.query.get("attempt"),
    issued: r.query.get("issued"),
    token: r.query.get("token"),
    now,
    ttlSeconds: Duration.toSeconds(callbackTokenTtl),
    toleranceSeconds
  })

/** Unsigned callbacks (Luma): the per-attempt token we put in the callback URL, until it expires. */
export const callbackTokens = (provider: string): WebhookDefinition["verifier"] =>
  constant((context) => {
    const secrets = context.usable(context.callbackTokens)
    return secrets.length === 0 ? Option.none() : Option.some(Effect.succeed(urlToken(provider, secrets, context)))
  })

const TOKEN_PARAMS = ["attempt", "issued", "token"] as const

/**
 * A signed provider whose callback URL we set per request (Replicate, fal): its own signature first, AND then the
 * attempt token of the URL, which binds the callback to the attempt it names (so a job whose submit response was
 * lost is still found). A signature that fails is refused as before; a genuine signature on a URL whose token is
 * forged or malformed is `bad_token` (401), one past CALLBACK_TOKEN_TTL `expired` (410). A URL with no token at all
 * (an attempt submitted before tokens were issued, or without CALLBACK_TOKEN_SECRET) is what it was before: the
 * signature alone, mapped by the provider's task id. With no usable token secret the token cannot be checked and
 * names nothing: the signature alone, as well.
 */
export const withCallbackToken = (
  provider: string,
  signed: WebhookDefinition["verifier"]
): WebhookDefinition["verifier"] =>
  S.map(signed, (build) => (context) => {
    const secrets = context.usable(context.callbackTokens)
    const token = urlToken(provider, secrets, context)
    return Option.map(build(context), (make) =>
      Effect.map(make, (verify): Verify =>
      (r, now) =>
        mapVerification(verify(r, now), (signature) => {
          if (Either.isLeft(signature) || secrets.length === 0 || TOKEN_PARAMS.every((p) => !r.query.has(p))) {
            return signature
          }
          const t = token(r, now)
          return Either.isLeft(t)
            ? Either.left(t.left === "expired" ? "expired" : "bad_token")
            : Either.right({ ...signature.right, attemptId: t.right.attemptId })
        })))
  })
