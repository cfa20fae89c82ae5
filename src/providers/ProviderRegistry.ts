import { Effect, Option } from "effect"
import type { WebhookProtocol } from "./ProviderAdapter.js"
import type { Verify } from "./ProviderDefinition.js"
import { providers } from "./providers.js"
import { CallbackTokenSettings, ProviderWebhookSettings } from "./ProviderSettings.js"

export interface WebhookEndpoint {
  readonly protocol: WebhookProtocol
  readonly verify: Verify
}

/**
 * The providers this runner accepts callbacks from: each push-capable definition of the list whose secrets are
 * configured. Any other provider has no webhook endpoint (404), like one that only answers polls (Runway, Veo).
 */
export class ProviderRegistry extends Effect.Service<ProviderRegistry>()("ProviderRegistry", {
  effect: Effect.gen(function*() {
    const settings = yield* ProviderWebhookSettings.config
    const { secrets, ttl } = yield* CallbackTokenSettings.config
    const context = { toleranceSeconds: settings.toleranceSeconds, callbackTokens: secrets, callbackTokenTtl: ttl }
    const endpoints = new Map<string, WebhookEndpoint>()
    for (const d of providers) {
      const build = d.webhook === undefined ? Option.none() : settings.verifiers[d.name]!(context)
      if (d.webhook !== undefined && Option.isSome(build)) {
        endpoints.set(d.name, { protocol: d.webhook.protocol, verify: yield* build.value })
      }
    }
    return {
      webhookEndpoint: (provider: string): Option.Option<WebhookEndpoint> =>
        Option.fromNullable(endpoints.get(provider))
    } as const
  })
}) {}
