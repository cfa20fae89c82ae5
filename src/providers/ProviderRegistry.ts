import { HttpClient, HttpClientResponse } from "@effect/platform"
import { Clock, Config, Duration, Effect, Either, Option, Redacted, Ref, Schema } from "effect"
import type { WebhookProtocol } from "./ProviderAdapter.js"
import {
  type Ed25519Jwk,
  type SignatureRejection,
  type Verified,
  verifyCallbackToken,
  verifyFalWebhook,
  verifyStandardWebhook,
  type VersionedSecret
} from "./signatures.js"
import { webhookProtocols } from "./webhookProtocols.js"

/** What the webhook gateway sees of a request: enough to verify it, nothing parsed yet. */
export interface WebhookRequest {
  readonly headers: Readonly<Record<string, string | undefined>>
  readonly query: URLSearchParams
  readonly body: Uint8Array
}

export interface WebhookEndpoint {
  readonly protocol: WebhookProtocol
  readonly verify: (request: WebhookRequest) => Effect.Effect<Either.Either<Verified, SignatureRejection>>
}

const secretPair = (name: string) =>
  Config.all({
    current: Config.option(Config.redacted(name)),
    previous: Config.option(Config.redacted(`${name}_PREVIOUS`))
  }).pipe(Config.map(({ current, previous }): ReadonlyArray<VersionedSecret> => [
    ...Option.toArray(Option.map(current, (s) => ({ version: "current", secret: Redacted.value(s) }))),
    ...Option.toArray(Option.map(previous, (s) => ({ version: "previous", secret: Redacted.value(s) })))
  ]))

const Ed25519Key = Schema.Struct({
  kid: Schema.optional(Schema.String),
  kty: Schema.Literal("OKP"),
  crv: Schema.Literal("Ed25519"),
  x: Schema.String
})
/** Keys of other types in the set are skipped, not a reason to reject the whole set. */
const Jwks = Schema.Struct({ keys: Schema.Array(Schema.Unknown) }).pipe(
  Schema.transform(Schema.Struct({ keys: Schema.Array(Schema.typeSchema(Ed25519Key)) }), {
    strict: true,
    decode: ({ keys }) => ({ keys: keys.filter(Schema.is(Ed25519Key)) }),
    encode: (jwks) => jwks
  })
)

/**
 * fal.ai's signing keys: fetched from its JWKS, cached (24 h), fetched again when no cached key verifies a
 * signature — at most once a minute whatever the outcome, and one fetch at a time — so a key rotation is
 * picked up without a restart and forged requests cannot turn into a stream of outbound fetches.
 */
const makeFalKeys = (url: string) =>
  Effect.gen(function*() {
    const client = yield* HttpClient.HttpClient
    const cache = yield* Ref.make<{ keys: ReadonlyArray<Ed25519Jwk>; fetchedAt: number; triedAt: number }>({
      keys: [],
      fetchedAt: 0,
      triedAt: 0
    })
    const single = yield* Effect.makeSemaphore(1)
    const fetch = (now: number) =>
      client.get(url).pipe(
        Effect.flatMap(HttpClientResponse.schemaBodyJson(Jwks)),
        Effect.scoped,
        Effect.timeout("5 seconds"),
        Effect.tap((jwks) => Ref.set(cache, { keys: jwks.keys, fetchedAt: now, triedAt: now })),
        Effect.tapError((e) =>
          Effect.zipRight(
            Ref.update(cache, (c) => ({ ...c, triedAt: now })),
            Effect.logWarning("fal JWKS fetch failed", e)
          )
        ),
        Effect.ignore
      )
    const due = (refresh: boolean) =>
      Effect.map(Effect.all([Clock.currentTimeMillis, Ref.get(cache)]), ([now, c]) => {
        const stale = c.keys.length === 0 || now - c.fetchedAt > Duration.toMillis("24 hours") || refresh
        return stale && now - c.triedAt > Duration.toMillis("1 minute") ? Option.some(now) : Option.none()
      })
    // the common case (a fresh cache) takes no permit; a fetch is re-checked under the permit
    return (refresh: boolean) =>
      Effect.gen(function*() {
        if (Option.isSome(yield* due(refresh))) {
          yield* single.withPermits(1)(
            Effect.flatMap(due(refresh), Option.match({ onNone: () => Effect.void, onSome: fetch }))
          )
        }
        return (yield* Ref.get(cache)).keys
      })
  })

/**
 * The providers this runner accepts callbacks from. A provider whose secret is not configured has no webhook
 * endpoint (404), like a provider that only supports polling (Runway, Veo).
 */
export class ProviderRegistry extends Effect.Service<ProviderRegistry>()("ProviderRegistry", {
  effect: Effect.gen(function*() {
    const tolerance = yield* Config.integer("WEBHOOK_TOLERANCE_SECONDS").pipe(Config.withDefault(300))
    const openai = yield* secretPair("OPENAI_WEBHOOK_SECRET")
    const replicate = yield* secretPair("REPLICATE_WEBHOOK_SECRET")
    const callbackTokens = yield* secretPair("CALLBACK_TOKEN_SECRET")
    const falJwksUrl = yield* Config.option(Config.string("FAL_JWKS_URL"))
    const falUserId = yield* Config.option(Config.string("FAL_USER_ID"))
    const falKeys = Option.isSome(falJwksUrl) ? Option.some(yield* makeFalKeys(falJwksUrl.value)) : Option.none()
    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

    const standard = (protocol: WebhookProtocol, secrets: ReadonlyArray<VersionedSecret>): WebhookEndpoint => ({
      protocol,
      verify: (r) =>
        Effect.map(
          now,
          (now) =>
            verifyStandardWebhook({ secrets, headers: r.headers, body: r.body, now, toleranceSeconds: tolerance })
        )
    })

    const endpoints = new Map<string, WebhookEndpoint>()
    if (openai.length > 0) endpoints.set("openai", standard(webhookProtocols.openai, openai))
    if (replicate.length > 0) endpoints.set("replicate", standard(webhookProtocols.replicate, replicate))
    if (callbackTokens.length > 0) {
      endpoints.set("luma", {
        protocol: webhookProtocols.luma,
        verify: (r) =>
          Effect.succeed(verifyCallbackToken({
            secrets: callbackTokens,
            provider: "luma",
            attemptId: r.query.get("attempt"),
            token: r.query.get("token")
          }))
      })
    }
    if (Option.isSome(falKeys) && Option.isSome(falUserId)) {
      const keys = falKeys.value
      const userId = falUserId.value
      endpoints.set("fal", {
        protocol: webhookProtocols.fal,
        verify: (r) =>
          Effect.gen(function*() {
            const at = yield* now
            const check = (k: ReadonlyArray<Ed25519Jwk>) =>
              verifyFalWebhook({
                keys: k,
                userId,
                headers: r.headers,
                body: r.body,
                now: at,
                toleranceSeconds: tolerance
              })
            const first = check(yield* keys(false))
            if (Either.isRight(first) || first.left !== "bad_signature") return first
            return check(yield* keys(true))
          })
      })
    }

    return {
      webhookEndpoint: (provider: string): Option.Option<WebhookEndpoint> =>
        Option.fromNullable(endpoints.get(provider))
    } as const
  })
}) {}
