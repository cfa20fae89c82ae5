import * as S from "../config/Settings.js"
import { hostPatternList } from "../output/hostPatterns.js"
import type { ProviderDefinition } from "./ProviderDefinition.js"
import { providers } from "./providers.js"
import { secretPair } from "./webhookVerifiers.js"

const env = (d: ProviderDefinition) => d.name.toUpperCase()

/** One provider's client settings: where it is, our key, whether its endpoint answers lookups, and its own. */
const clientSettings = (d: ProviderDefinition) =>
  S.all({
    baseUrl: S.string(`${env(d)}_BASE_URL`, `${d.title} API base URL`, d.defaultBaseUrl),
    apiKey: S.secret(`${env(d)}_API_KEY`, `${d.title} API key`),
    // None of these providers documents a lookup by idempotency key: it is off unless the endpoint is known to
    // answer the simulator's. Off, an unknown submit is never guessed to be absent: it waits for a callback, then
    // goes to manual review.
    lookup: S.boolean(
      `${env(d)}_LOOKUP`,
      `${d.title} endpoint answers the simulator's lookup by idempotency key (GET /_lookup/{key})`,
      false
    ),
    outputHosts: hostPatternList(
      `${env(d)}_OUTPUT_HOSTS`,
      `hosts ${d.title}'s outputs are downloaded from, redirects included (*.suffix: subdomains; host:port: that port)`,
      d.outputHosts
    ),
    client: d.client
  })

/** How the platform calls providers: shared settings, then one record per provider of the list. */
export const ProviderSettings = S.area("providers", "Provider APIs: addresses, keys, timeouts", {
  publicBaseUrl: S.string(
    "PUBLIC_BASE_URL",
    "This platform's public URL: providers' webhooks go to /webhooks/<provider>; https makes the session cookie Secure and is the scheme of the default allowed Origin",
    "http://127.0.0.1:3000"
  ),
  timeout: S.duration(
    "PROVIDER_TIMEOUT",
    "Time limit of one provider call (submit, query, cancel): the request, its answer and the answer's body read",
    "15 seconds"
  ),
  clients: S.all(Object.fromEntries(providers.map((d) => [d.name, clientSettings(d)])))
})

/**
 * The secret of the per-attempt tokens in the callback URLs of providers that take a webhook URL per request (Luma,
 * Replicate, fal): the clients sign with the current one, the gateway accepts the current and the previous one. One
 * area, read by both.
 */
export const CallbackTokenSettings = S.area("callback tokens", "Per-attempt callback URL tokens", {
  secrets: secretPair(
    "CALLBACK_TOKEN_SECRET",
    "Secret of the per-attempt callback tokens in Luma's, Replicate's and fal's webhook URLs (they name the attempt, so a lost submit response is resolved by the webhook); unset, Luma callbacks are refused (404) and Replicate's and fal's URLs carry no token"
  ),
  // a leaked callback URL is a way to write into the inbox: it stops working with its attempt, and after this
  ttl: S.duration(
    "CALLBACK_TOKEN_TTL",
    "A callback URL's token is refused (410) this long after its attempt was submitted; an unsigned (Luma) one also once its attempt has ended or been replaced",
    "24 hours"
  )
})

/** How the webhook gateway verifies providers' callbacks: one verifier per push-capable provider of the list. */
export const ProviderWebhookSettings = S.area("provider webhooks", "Verification of provider callbacks", {
  toleranceSeconds: S.integer(
    "WEBHOOK_TOLERANCE_SECONDS",
    "Largest age (and clock skew) of a signed webhook's timestamp",
    300,
    { min: 1 }
  ),
  verifiers: S.all(
    Object.fromEntries(providers.flatMap((d) => d.webhook === undefined ? [] : [[d.name, d.webhook.verifier]]))
  )
})
