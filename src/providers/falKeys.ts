import * as HttpClient from "@effect/platform/HttpClient"
import * as HttpClientResponse from "@effect/platform/HttpClientResponse"
import { Clock, Duration, Effect, Option, Ref, Schema } from "effect"
import { skipping } from "./ProviderAdapter.js"
import type { Ed25519Jwk } from "./signatures.js"

const Ed25519Key = Schema.Struct({
  kid: Schema.optional(Schema.String),
  kty: Schema.Literal("OKP"),
  crv: Schema.Literal("Ed25519"),
  x: Schema.String
})
/** Keys of other types in the set are skipped, not a reason to reject the whole set. */
const Jwks = Schema.Struct({ keys: skipping(Ed25519Key) })

/** The keys at hand, and whether the last fetch of the set succeeded (false: they may be stale, or none). */
export interface FalKeySet {
  readonly keys: ReadonlyArray<Ed25519Jwk>
  readonly current: boolean
}

/**
 * fal.ai's signing keys: fetched from its JWKS, cached (24 h), fetched again when no cached key verifies a
 * signature — at most once a minute whatever the outcome, and one fetch at a time — so a key rotation is
 * picked up without a restart and forged requests cannot turn into a stream of outbound fetches. A fetch gives up
 * after `timeout` (interrupted: the HTTP client aborts the request), so a hanging JWKS endpoint holds a webhook
 * that long at most, and those waiting for the one fetch no longer than it.
 */
export const makeFalKeys = (url: string, timeout: Duration.Duration) =>
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
        Effect.timeout(timeout),
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
    return (refresh: boolean): Effect.Effect<FalKeySet> =>
      Effect.gen(function*() {
        if (Option.isSome(yield* due(refresh))) {
          yield* single.withPermits(1)(
            Effect.flatMap(due(refresh), Option.match({ onNone: () => Effect.void, onSome: fetch }))
          )
        }
        const c = yield* Ref.get(cache)
        return { keys: c.keys, current: c.keys.length > 0 && c.fetchedAt >= c.triedAt }
      })
  })
