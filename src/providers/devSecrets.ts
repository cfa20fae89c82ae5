/**
 * The development secrets `npm start` and the provider simulator share by default. They are written here, so they
 * are nobody's secret: the webhook gateway never accepts them for a provider whose base URL is not on this machine
 * (ProviderRegistry).
 */
export const devSecret = (provider: string) =>
  "whsec_" + Buffer.from(`dev-${provider}-webhook-secret-0123456789`.slice(0, 32)).toString("base64")

/** The development CALLBACK_TOKEN_SECRET (Luma's per-attempt callback tokens) of `npm start` and the simulator. */
export const devCallbackTokenSecret = "dev-callback-token-secret"
