import { falWebhooks } from "./fal.js"
import { lumaWebhooks } from "./luma.js"
import { openaiWebhooks } from "./openai.js"
import type { WebhookProtocol } from "./ProviderAdapter.js"
import { replicateWebhooks } from "./replicate.js"

/**
 * How each push-capable provider signs and words its callbacks: the gateway verifies and checks with it, the
 * inbox processor reads stored bodies with it. Runway and Veo only answer polls.
 */
export const webhookProtocols = {
  openai: openaiWebhooks,
  replicate: replicateWebhooks,
  fal: falWebhooks,
  luma: lumaWebhooks
} as const satisfies Record<string, WebhookProtocol>

export const webhookProtocolOf = (provider: string): WebhookProtocol | undefined =>
  Object.hasOwn(webhookProtocols, provider) ? webhookProtocols[provider as keyof typeof webhookProtocols] : undefined
