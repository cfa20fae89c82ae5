import * as S from "../config/Settings.js"
import { devSecret } from "../providers/devSecrets.js"

/** `npm run simulator`: its own process, its own settings (listed with the runner's for the README). */
export const SimulatorSettings = S.area("simulator", "`npm run simulator`: the provider simulator as its own server", {
  port: S.port("SIM_PORT", "Port of the standalone simulator", 4010),
  openaiSecret: S.string("SIM_OPENAI_WEBHOOK_SECRET", "Signs its OpenAI webhooks", devSecret("openai")),
  replicateSecret: S.string("SIM_REPLICATE_WEBHOOK_SECRET", "Signs its Replicate webhooks", devSecret("replicate")),
  openaiWebhookUrl: S.string(
    "SIM_OPENAI_WEBHOOK_URL",
    "Where it sends OpenAI webhooks (OpenAI's are configured per project, not per request)",
    "http://127.0.0.1:3000/webhooks/openai"
  )
})
