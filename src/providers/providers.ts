import { fal } from "./fal.js"
import { luma } from "./luma.js"
import { openai } from "./openai.js"
import type { WebhookProtocol } from "./ProviderAdapter.js"
import type { ProviderDefinition } from "./ProviderDefinition.js"
import { replicate } from "./replicate.js"
import { runway } from "./runway.js"
import { veo } from "./veo.js"

/** Every provider the platform speaks: the one place a provider is named. */
export const providers: ReadonlyArray<ProviderDefinition> = [openai, replicate, fal, runway, luma, veo]

export const providerNames: ReadonlyArray<string> = providers.map((p) => p.name)

export const definitionOf = (name: string): ProviderDefinition | undefined => providers.find((p) => p.name === name)

/** How a push-capable provider words its callbacks: the inbox processor reads stored bodies with it. */
export const webhookProtocolOf = (name: string): WebhookProtocol | undefined => definitionOf(name)?.webhook?.protocol
