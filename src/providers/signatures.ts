import { Either } from "effect"
import {
  createHash,
  createHmac,
  createPublicKey,
  type JsonWebKey,
  type KeyObject,
  timingSafeEqual,
  verify
} from "node:crypto"

/**
 * Why a webhook was refused. The HTTP answer never says which of the first four (401 with no detail);
 * `bad_token` is a signed provider's genuine signature on a URL whose attempt token does not verify,
 * `expired` is a genuine callback URL that is no longer in use (410), `keys_unavailable` a signature that could
 * not be checked because the provider's keys could not be fetched (503: a genuine callback is retried later).
 */
export type SignatureRejection =
  | "missing_headers"
  | "stale_timestamp"
  | "bad_signature"
  | "bad_token"
  | "expired"
  | "keys_unavailable"

export interface Verified {
  /** Which configured key matched ("current", "previous", a JWKS kid ...): recorded with the inbox row. */
  readonly keyVersion: string
  readonly eventId: string | null
  readonly timestamp: Date | null
  /** The provider task id the signature itself covers (fal signs the request id apart from the body). */
  readonly subject?: string | undefined
  /** The attempt a verified callback-URL token names: the callback is about that attempt's job. */
  readonly attemptId?: string | undefined
}

export interface VersionedSecret {
  readonly version: string
  readonly secret: string
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

const constantTimeEqual = (a: string, b: string): boolean => {
  const x = Buffer.from(a)
  const y = Buffer.from(b)
  return x.length === y.length && timingSafeEqual(x, y)
}

const header = (headers: Readonly<Record<string, string | undefined>>, name: string): string | undefined =>
  headers[name.toLowerCase()]

const withinWindow = (timestampSeconds: number, now: Date, toleranceSeconds: number): boolean =>
  Number.isFinite(timestampSeconds) && Math.abs(now.getTime() / 1000 - timestampSeconds) <= toleranceSeconds

/** A whsec_ secret's key bytes, decoded once per secret (a webhook's verification is on the hot path). */
const standardKeys = new Map<string, Buffer>()

/**
 * The key of a Standard Webhooks secret: base64 after an optional `whsec_`. A secret that is not base64 (or empty)
 * throws, as the `standardwebhooks` library's own constructor does: Buffer's decoding would skip what it cannot read.
 */
const standardKey = (secret: string): Buffer => {
  const cached = standardKeys.get(secret)
  if (cached !== undefined) return cached
  const text = secret.startsWith("whsec_") ? secret.slice("whsec_".length) : secret
  const key = Buffer.from(text, "base64")
  const unpadded = (b64: string) => b64.replace(/=+$/, "")
  if (key.length === 0 || unpadded(key.toString("base64")) !== unpadded(text)) {
    throw new Error("a Standard Webhooks secret is not base64 (whsec_<base64>)")
  }
  standardKeys.set(secret, key)
  return key
}

/**
 * Standard Webhooks (OpenAI, Replicate): HMAC-SHA256 over `${id}.${timestamp}.${body}` with a whsec_ secret,
 * "v1,<base64>" entries space-separated. The HMAC is Node's (OpenSSL) over the raw bytes as received, with the key
 * decoded once per secret: the `standardwebhooks` library (which signs in our tests and the simulator) computes the
 * same signature in JavaScript, a body decoded and encoded again and its key decoded per call: 6% of the webhook
 * runner's CPU (bench:webhooks profile, stop 50). Comparison is constant-time; the window is ours (configurable)
 * rather than the library's fixed one.
 */
export const verifyStandardWebhook = (options: {
  readonly secrets: ReadonlyArray<VersionedSecret>
  readonly headers: Readonly<Record<string, string | undefined>>
  readonly body: Uint8Array
  readonly now: Date
  readonly toleranceSeconds: number
}): Either.Either<Verified, SignatureRejection> => {
  const id = header(options.headers, "webhook-id")
  const ts = header(options.headers, "webhook-timestamp")
  const signatures = header(options.headers, "webhook-signature")
  if (!id || !ts || !signatures || !/^\d{1,12}$/.test(ts)) return Either.left("missing_headers")
  const seconds = Number(ts)
  if (!withinWindow(seconds, options.now, options.toleranceSeconds)) return Either.left("stale_timestamp")
  const offered = signatures.split(" ").filter((s) => s.startsWith("v1,"))
  for (const { secret, version } of options.secrets) {
    const expected = "v1," +
      createHmac("sha256", standardKey(secret)).update(`${id}.${seconds}.`).update(options.body).digest("base64")
    if (offered.some((s) => constantTimeEqual(s, expected))) {
      return Either.right({ keyVersion: version, eventId: id, timestamp: new Date(seconds * 1000) })
    }
  }
  return Either.left("bad_signature")
}

/** A JWKS public key of fal.ai (Ed25519, OKP). */
export interface Ed25519Jwk {
  readonly kid?: string | undefined
  readonly kty: "OKP"
  readonly crv: "Ed25519"
  readonly x: string
}

/**
 * fal.ai: Ed25519 over `request_id \n user_id \n timestamp \n sha256hex(body)`, hex signature in
 * X-Fal-Webhook-Signature, keys from fal's JWKS. Any key of the set may have signed it.
 */
export const verifyFalWebhook = (options: {
  readonly keys: ReadonlyArray<Ed25519Jwk>
  /** fal signs every customer's webhooks with the same keys: only our account's user id is accepted. */
  readonly userId: string
  readonly headers: Readonly<Record<string, string | undefined>>
  readonly body: Uint8Array
  readonly now: Date
  readonly toleranceSeconds: number
}): Either.Either<Verified, SignatureRejection> => {
  const requestId = header(options.headers, "x-fal-webhook-request-id")
  const userId = header(options.headers, "x-fal-webhook-user-id")
  const ts = header(options.headers, "x-fal-webhook-timestamp")
  const signature = header(options.headers, "x-fal-webhook-signature")
  if (!requestId || !userId || !ts || !signature || !/^\d{1,12}$/.test(ts) || !/^[0-9a-f]+$/i.test(signature)) {
    return Either.left("missing_headers")
  }
  if (!withinWindow(Number(ts), options.now, options.toleranceSeconds)) return Either.left("stale_timestamp")
  if (!constantTimeEqual(userId, options.userId)) return Either.left("bad_signature")
  const message = Buffer.from(falSigningString(requestId, userId, ts, options.body))
  const sig = Buffer.from(signature, "hex")
  for (const [i, jwk] of options.keys.entries()) {
    try {
      if (verify(null, message, publicKeyOf(jwk), sig)) {
        return Either.right({
          keyVersion: jwk.kid ?? `jwks#${i}`,
          eventId: null,
          timestamp: new Date(Number(ts) * 1000),
          subject: requestId
        })
      }
    } catch {
      // a malformed key in the set verifies nothing
    }
  }
  return Either.left("bad_signature")
}

// the JWKS cache hands out the same key objects until it refreshes: parse each once
const publicKeys = new WeakMap<Ed25519Jwk, KeyObject>()
const publicKeyOf = (jwk: Ed25519Jwk): KeyObject => {
  let key = publicKeys.get(jwk)
  if (key === undefined) {
    key = createPublicKey({ key: jwk as JsonWebKey, format: "jwk" })
    publicKeys.set(jwk, key)
  }
  return key
}

export const falSigningString = (requestId: string, userId: string, timestamp: string, body: Uint8Array): string =>
  [requestId, userId, timestamp, createHash("sha256").update(body).digest("hex")].join("\n")

/**
 * Callback URLs we set per request (Luma, Replicate, fal; Kling would too): the URL carries a per-attempt token,
 * HMAC(secret, provider + attempt id + issue time), and the issue time (unix seconds) beside it. Nothing is
 * stored; the comparison is constant-time. A token older than the TTL is expired: a leaked URL stops working.
 */
export const callbackToken = (secret: string, provider: string, attemptId: string, issuedSeconds: number): string =>
  createHmac("sha256", secret).update(`callback:${provider}:${attemptId}:${issuedSeconds}`).digest("base64url")

/** The query of a callback URL: `attempt=<id>&issued=<unix seconds>&token=<token>`. */
export const callbackQuery = (secret: string, provider: string, attemptId: string, now: Date): string => {
  const issued = Math.floor(now.getTime() / 1000)
  return `attempt=${attemptId}&issued=${issued}&token=${callbackToken(secret, provider, attemptId, issued)}`
}

export const verifyCallbackToken = (options: {
  readonly secrets: ReadonlyArray<VersionedSecret>
  readonly provider: string
  readonly attemptId: string | null
  readonly issued: string | null
  readonly token: string | null
  readonly now: Date
  /** How long a token is accepted after it was issued. */
  readonly ttlSeconds: number
  /** How far in the future an issue time may be (our runners' clock skew). */
  readonly toleranceSeconds: number
}): Either.Either<Verified, SignatureRejection> => {
  const { attemptId, issued, token } = options
  if (!attemptId || !token || !issued || !UUID.test(attemptId) || !/^\d{1,12}$/.test(issued)) {
    return Either.left("missing_headers")
  }
  for (const { secret, version } of options.secrets) {
    if (constantTimeEqual(callbackToken(secret, options.provider, attemptId, Number(issued)), token)) {
      const age = options.now.getTime() / 1000 - Number(issued)
      return age > options.ttlSeconds || age < -options.toleranceSeconds
        ? Either.left("expired")
        : Either.right({ keyVersion: version, eventId: null, timestamp: null, attemptId })
    }
  }
  return Either.left("bad_signature")
}
