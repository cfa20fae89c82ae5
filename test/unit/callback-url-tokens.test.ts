import { FetchHttpClient } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Duration, Effect, Either, Option } from "effect"
import { Webhook } from "standardwebhooks"
import { verificationEffect, type WebhookRequest } from "../../src/providers/ProviderDefinition.js"
import type { VersionedSecret } from "../../src/providers/signatures.js"
import { callbackQuery } from "../../src/providers/signatures.js"
import { standardWebhooks, withCallbackToken } from "../../src/providers/webhookVerifiers.js"

/**
 * A signed provider's webhook (Replicate: Standard Webhooks) on a callback URL carrying the attempt token: the
 * signature and the token are both checked, and the token names the attempt.
 */
const SECRET = "whsec_" + Buffer.from("replicate-unit-secret-32-bytes!!").toString("base64")
const TOKENS: ReadonlyArray<VersionedSecret> = [{ version: "current", secret: "callback-secret" }]
const attemptId = crypto.randomUUID()

const verifierWith = (callbackTokens: ReadonlyArray<VersionedSecret>) =>
  Effect.gen(function*() {
    const build = yield* Effect.withConfigProvider(
      withCallbackToken("replicate", standardWebhooks("REPLICATE_WEBHOOK_SECRET", "Replicate")).config,
      ConfigProvider.fromMap(new Map([["REPLICATE_WEBHOOK_SECRET", SECRET]]))
    )
    const made = build({
      toleranceSeconds: 300,
      callbackTokens,
      usable: (s) => s,
      callbackTokenTtl: Duration.hours(24)
    })
    const verify = yield* Option.getOrThrow(made)
    // as the gateway runs it: received now, its answer as an Effect whether it came at once or not
    return (r: WebhookRequest) => verificationEffect(verify(r, new Date()))
  }).pipe(Effect.provide(FetchHttpClient.layer))

const body = JSON.stringify({ id: "replicate-1", status: "processing" })
const signed = (secret = SECRET) => {
  const now = new Date()
  return {
    "webhook-id": "msg_1",
    "webhook-timestamp": String(Math.floor(now.getTime() / 1000)),
    "webhook-signature": new Webhook(secret).sign("msg_1", now, body)
  }
}
const request = (query: string, headers = signed()) => ({
  headers,
  query: new URLSearchParams(query),
  body: new TextEncoder().encode(body)
})
const tokenFor = (provider: string, secondsAgo = 0, secret = "callback-secret") =>
  callbackQuery(secret, provider, attemptId, new Date(Date.now() - secondsAgo * 1000))

describe("callback URL tokens on signed webhooks", () => {
  it.live("signature AND token: the token names the attempt; forged, foreign or expired tokens are refused", () =>
    Effect.gen(function*() {
      const verify = yield* verifierWith(TOKENS)
      const ok = yield* verify(request(tokenFor("replicate")))
      expect(Either.getOrThrow(ok)).toMatchObject({ keyVersion: "current", eventId: "msg_1", attemptId })
      expect(yield* verify(request(tokenFor("replicate", 0, "not-ours")))).toEqual(Either.left("bad_token"))
      expect(yield* verify(request(tokenFor("fal")))).toEqual(Either.left("bad_token"))
      expect(yield* verify(request(`attempt=${attemptId}`))).toEqual(Either.left("bad_token"))
      expect(yield* verify(request(tokenFor("replicate", 25 * 3600)))).toEqual(Either.left("expired"))
      // the provider's signature comes first: a valid token does not make up for a forged body
      const forged = signed("whsec_" + Buffer.from("someone-else-secret-32-bytes!!!!").toString("base64"))
      expect(yield* verify(request(tokenFor("replicate"), forged))).toEqual(Either.left("bad_signature"))
    }))

  it.live("a URL with no token is the signature alone, naming no attempt (attempts submitted before tokens)", () =>
    Effect.gen(function*() {
      const verify = yield* verifierWith(TOKENS)
      const bare = Either.getOrThrow(yield* verify(request("")))
      expect(bare.keyVersion).toBe("current")
      expect(bare.attemptId).toBeUndefined()
    }))

  it.live("without a callback token secret, a token cannot be checked and names nothing", () =>
    Effect.gen(function*() {
      const verify = yield* verifierWith([])
      const r = Either.getOrThrow(yield* verify(request(tokenFor("replicate"))))
      expect(r.attemptId).toBeUndefined()
    }))
})
