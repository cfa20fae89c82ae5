import { Effect, Option } from "effect"
import { isLoopbackUrl } from "../config/loopback.js"
import { devCallbackTokenSecret, devSecret } from "./devSecrets.js"
import type { WebhookProtocol } from "./ProviderAdapter.js"
import type { Verify } from "./ProviderDefinition.js"
import { providers } from "./providers.js"
import { CallbackTokenSettings, ProviderSettings, ProviderWebhookSettings } from "./ProviderSettings.js"
import type { VersionedSecret } from "./signatures.js"

export interface WebhookEndpoint {
  readonly protocol: WebhookProtocol
  readonly verify: Verify
}

/**
 * The providers this runner accepts callbacks from: each push-capable definition of the list whose secrets are
 * configured. Any other provider has no webhook endpoint (404), like one that only answers polls (Runway, Veo).
 *
 * The simulator's development secrets (devSecrets.ts, `npm start`'s defaults) are written in this repository, so
 * whoever reads it could sign a webhook with them. They verify only callbacks of a provider whose base URL is on this
 * machine (the simulator); for any other base URL they are dropped with a warning at start, as if unset (404 when
 * nothing else is configured), rather than refusing to start: polling still drives that provider's tasks.
 */
export class ProviderRegistry extends Effect.Service<ProviderRegistry>()("ProviderRegistry", {
  effect: Effect.gen(function*() {
    const settings = yield* ProviderWebhookSettings.config
    const { secrets, ttl } = yield* CallbackTokenSettings.config
    const { clients } = yield* ProviderSettings.config
    const development = new Set([...providers.map((d) => devSecret(d.name)), devCallbackTokenSecret])
    const endpoints = new Map<string, WebhookEndpoint>()
    for (const d of providers) {
      if (d.webhook === undefined) continue
      const baseUrl = clients[d.name]!.baseUrl
      const simulated = isLoopbackUrl(baseUrl)
      const dropped: Array<string> = []
      const usable = (configured: ReadonlyArray<VersionedSecret>) =>
        simulated ? configured : configured.filter((s) => {
          if (development.has(s.secret)) dropped.push(s.version)
          return !development.has(s.secret)
        })
      const build = settings.verifiers[d.name]!({
        toleranceSeconds: settings.toleranceSeconds,
        callbackTokens: secrets,
        callbackTokenTtl: ttl,
        usable
      })
      if (dropped.length > 0) {
        yield* Effect.logWarning(
          `${d.title} webhooks: the simulator's development secret is refused, as ${d.name.toUpperCase()}_BASE_URL is ` +
            `not on this machine` + (Option.isNone(build) ? ": no webhook endpoint until a real secret is set" : "")
        ).pipe(Effect.annotateLogs({ provider: d.name, base_url: baseUrl, secrets: dropped.join(",") }))
      }
      if (Option.isSome(build)) endpoints.set(d.name, { protocol: d.webhook.protocol, verify: yield* build.value })
    }
    return {
      webhookEndpoint: (provider: string): Option.Option<WebhookEndpoint> =>
        Option.fromNullable(endpoints.get(provider))
    } as const
  })
}) {}
