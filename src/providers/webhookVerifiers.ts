import { Clock, Duration, Effect, Option, Redacted } from "effect"
import * as S from "../config/Settings.js"
import { constant, type WebhookDefinition } from "./ProviderDefinition.js"
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

const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

/** Standard Webhooks (OpenAI, Replicate): HMAC over id.timestamp.body with a whsec_ secret. */
export const standardWebhooks = (secretName: string, title: string): WebhookDefinition["verifier"] =>
  S.map(
    secretPair(secretName, `${title} webhook signing secret (whsec_…); unset, ${title} webhooks are refused (404)`),
    (configured) => ({ toleranceSeconds, usable }) => {
      const secrets = usable(configured)
      return secrets.length === 0 ? Option.none() : Option.some(Effect.succeed((r) =>
        Effect.map(
          now,
          (at) => verifyStandardWebhook({ secrets, headers: r.headers, body: r.body, now: at, toleranceSeconds })
        )
      ))
    }
  )

/** Unsigned callbacks (Luma): the per-attempt token we put in the callback URL, until it expires. */
export const callbackTokens = (provider: string): WebhookDefinition["verifier"] =>
  constant(({ callbackTokenTtl, callbackTokens, toleranceSeconds, usable }) => {
    const secrets = usable(callbackTokens)
    return secrets.length === 0 ?
      Option.none() :
      Option.some(Effect.succeed((r) =>
        Effect.map(now, (at) =>
          verifyCallbackToken({
            secrets,
            provider,
            attemptId: r.query.get("attempt"),
            issued: r.query.get("issued"),
            token: r.query.get("token"),
            now: at,
            ttlSeconds: Duration.toSeconds(callbackTokenTtl),
            toleranceSeconds
          }))
      ))
  })
