/** The development secrets both `npm start` and the simulator use by default (never in production). */
export const devSecret = (provider: string) =>
  "whsec_" + Buffer.from(`dev-${provider}-webhook-secret-0123456789`.slice(0, 32)).toString("base64")
