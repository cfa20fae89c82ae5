import { describe, expect, it } from "@effect/vitest"
import { Either } from "effect"
import { generateKeyPairSync, sign } from "node:crypto"
import { Webhook } from "standardwebhooks"
import {
  callbackQuery,
  callbackToken,
  type Ed25519Jwk,
  falSigningString,
  verifyCallbackToken,
  verifyFalWebhook,
  verifyStandardWebhook
} from "../../src/providers/signatures.js"

const vector = {
  secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
  id: "msg_p5jXN8AQM9LWM0D4loKWxJek",
  timestamp: "1614265330",
  body: "{\"test\": 2432232314}",
  signature: "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
}
const at = (seconds: number) => new Date(seconds * 1000)
const bytes = (s: string) => new TextEncoder().encode(s)

describe("Standard Webhooks", () => {
  const check = (headers: Record<string, string>, body = vector.body, now = at(1614265330), secrets = [
    { version: "current", secret: vector.secret }
  ]) => verifyStandardWebhook({ secrets, headers, body: bytes(body), now, toleranceSeconds: 300 })
  const headers = (signature = vector.signature, ts = vector.timestamp) => ({
    "webhook-id": vector.id,
    "webhook-timestamp": ts,
    "webhook-signature": signature
  })

  it("accepts the specification's test vector", () => {
    expect(check(headers())).toEqual(
      Either.right({ keyVersion: "current", eventId: vector.id, timestamp: at(1614265330) })
    )
  })

  it("accepts any of several space-separated signatures, and the previous key during rotation", () => {
    expect(Either.isRight(check(headers(`v1,Zm9vYmFy ${vector.signature}`)))).toBe(true)
    const rotated = check(headers(), vector.body, at(1614265330), [
      { version: "current", secret: "whsec_" + Buffer.from("another-secret-of-enough-length!").toString("base64") },
      { version: "previous", secret: vector.secret }
    ])
    expect(Either.getOrThrow(rotated).keyVersion).toBe("previous")
  })

  it("refuses a changed body, a forged signature, missing headers and a stale timestamp", () => {
    expect(check(headers(), "{\"test\": 2432232315}")).toEqual(Either.left("bad_signature"))
    expect(check(headers("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE"))).toEqual(Either.left("bad_signature"))
    expect(check({ "webhook-id": vector.id })).toEqual(Either.left("missing_headers"))
    expect(check(headers(), vector.body, at(1614265330 + 301))).toEqual(Either.left("stale_timestamp"))
    expect(check(headers(), vector.body, at(1614265330 - 301))).toEqual(Either.left("stale_timestamp"))
  })

  it("verifies on the raw bytes: the same JSON re-serialized does not verify", () => {
    const reserialized = JSON.stringify(JSON.parse(vector.body))
    expect(check(headers(), reserialized)).toEqual(Either.left("bad_signature"))
  })

  it("takes a secret with or without its whsec_ prefix, and throws on one that is not base64 (never a wrong key)", () => {
    const bare = vector.secret.slice("whsec_".length)
    expect(Either.isRight(check(headers(), vector.body, at(1614265330), [{ version: "bare", secret: bare }])))
      .toBe(true)
    // Buffer's base64 would skip the characters it cannot read and sign with what is left
    expect(() => check(headers(), vector.body, at(1614265330), [{ version: "bad", secret: "whsec_not*base64!" }]))
      .toThrow(/not base64/)
    expect(() => check(headers(), vector.body, at(1614265330), [{ version: "empty", secret: "whsec_" }]))
      .toThrow(/not base64/)
  })

  it("agrees with the library's own verify for a message it signs", () => {
    const wh = new Webhook(vector.secret)
    const now = new Date()
    const signature = wh.sign("msg_1", now, "{\"a\":1}")
    const ts = String(Math.floor(now.getTime() / 1000))
    const ok = verifyStandardWebhook({
      secrets: [{ version: "current", secret: vector.secret }],
      headers: { "webhook-id": "msg_1", "webhook-timestamp": ts, "webhook-signature": signature },
      body: bytes("{\"a\":1}"),
      now,
      toleranceSeconds: 300
    })
    expect(Either.isRight(ok)).toBe(true)
  })
})

describe("fal.ai Ed25519 webhooks", () => {
  const { privateKey, publicKey } = generateKeyPairSync("ed25519")
  const jwk = { ...publicKey.export({ format: "jwk" }), kid: "k1" } as Ed25519Jwk
  const other = generateKeyPairSync("ed25519").publicKey.export({ format: "jwk" }) as Ed25519Jwk
  const body = bytes("{\"request_id\":\"req-1\",\"status\":\"OK\",\"payload\":{}}")
  const now = new Date()
  const ts = String(Math.floor(now.getTime() / 1000))
  const signature = sign(null, Buffer.from(falSigningString("req-1", "user-1", ts, body)), privateKey).toString("hex")
  const headers = (sig = signature, timestamp = ts) => ({
    "x-fal-webhook-request-id": "req-1",
    "x-fal-webhook-user-id": "user-1",
    "x-fal-webhook-timestamp": timestamp,
    "x-fal-webhook-signature": sig
  })
  const check = (h: Record<string, string>, keys: ReadonlyArray<Ed25519Jwk> = [other, jwk], b = body) =>
    verifyFalWebhook({ keys, userId: "user-1", headers: h, body: b, now, toleranceSeconds: 300 })

  it("accepts a signature by any key of the JWKS and records which", () => {
    expect(Either.getOrThrow(check(headers())).keyVersion).toBe("k1")
  })

  it("refuses another key, a changed body, a bad signature and a stale timestamp", () => {
    expect(check(headers(), [other])).toEqual(Either.left("bad_signature"))
    expect(check(headers(), [jwk], bytes("{}"))).toEqual(Either.left("bad_signature"))
    expect(check(headers("00".repeat(64)))).toEqual(Either.left("bad_signature"))
    expect(check(headers(signature, String(Number(ts) - 1000)))).toEqual(Either.left("stale_timestamp"))
    expect(check({})).toEqual(Either.left("missing_headers"))
  })

  it("refuses a webhook signed for another fal account (fal signs every account's webhooks with one key set)", () => {
    const otherUser = sign(null, Buffer.from(falSigningString("req-1", "user-2", ts, body)), privateKey).toString("hex")
    expect(check({ ...headers(otherUser), "x-fal-webhook-user-id": "user-2" })).toEqual(Either.left("bad_signature"))
  })
})

describe("per-attempt callback tokens (Luma, Kling)", () => {
  const secrets = [{ version: "current", secret: "s1" }, { version: "previous", secret: "s0" }]
  const now = new Date("2026-01-01T00:00:00Z")
  const issued = now.getTime() / 1000 - 60
  const verify =
    (token: string | null, options: { attempt?: string | null; issued?: string | null } = {}) => (attemptId: string) =>
      verifyCallbackToken({
        secrets,
        provider: "luma",
        attemptId: options.attempt === undefined ? attemptId : options.attempt,
        issued: options.issued === undefined ? String(issued) : options.issued,
        token,
        now,
        ttlSeconds: 3600,
        toleranceSeconds: 300
      })

  it("accepts the attempt's token under the current or previous secret, nothing else", () => {
    const attemptId = crypto.randomUUID()
    const ok = (token: string | null, attempt: string | null = attemptId) => verify(token, { attempt })(attemptId)
    expect(Either.getOrThrow(ok(callbackToken("s1", "luma", attemptId, issued))).keyVersion).toBe("current")
    expect(Either.getOrThrow(ok(callbackToken("s0", "luma", attemptId, issued))).keyVersion).toBe("previous")
    expect(ok(callbackToken("s1", "luma", crypto.randomUUID(), issued))).toEqual(Either.left("bad_signature"))
    expect(ok(callbackToken("s1", "luma", attemptId, issued), crypto.randomUUID())).toEqual(
      Either.left("bad_signature")
    )
    expect(ok(null)).toEqual(Either.left("missing_headers"))
    // a token for the same attempt under another provider does not pass
    expect(ok(callbackToken("s1", "kling", attemptId, issued))).toEqual(Either.left("bad_signature"))
  })

  it("signs the issue time: a token moved to another time is forged, an old one is expired", () => {
    const attemptId = crypto.randomUUID()
    const token = callbackToken("s1", "luma", attemptId, issued)
    expect(verify(token, { issued: String(issued + 1) })(attemptId)).toEqual(Either.left("bad_signature"))
    expect(verify(token, { issued: null })(attemptId)).toEqual(Either.left("missing_headers"))
    const old = now.getTime() / 1000 - 3601
    expect(verify(callbackToken("s1", "luma", attemptId, old), { issued: String(old) })(attemptId)).toEqual(
      Either.left("expired")
    )
    const query = new URLSearchParams(callbackQuery("s1", "luma", attemptId, now))
    expect(verify(query.get("token"), { issued: query.get("issued") })(query.get("attempt")!)).toEqual(
      // the attempt the token names: the gateway maps the callback to it
      Either.right({ keyVersion: "current", eventId: null, timestamp: null, attemptId })
    )
  })
})
