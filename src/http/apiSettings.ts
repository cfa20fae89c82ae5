import * as S from "../config/Settings.js"
import { providerNames } from "../providers/providers.js"

/** The JSON API (`/v1/...`): what a request may carry, and which providers new tasks may name. */
export const ApiSettings = S.area("API", "the JSON API's requests: body size and providers", {
  maxBodyBytes: S.integer(
    "API_MAX_BODY_BYTES",
    "largest JSON API request body: 413 above it, checked on Content-Length and while the body streams in",
    64 * 1024,
    { min: 1024 }
  ),
  providers: S.refine(
    S.map(
      S.list(
        "PROVIDERS_ENABLED",
        "providers new tasks may name on this runner (400 for any other); unset: every provider of the list",
        providerNames
      ),
      (names) => names.map((n) => n.trim()).filter((n) => n.length > 0)
    ),
    `must name one or more of ${providerNames.join(", ")}`,
    (names) => names.length > 0 && names.every((n) => providerNames.includes(n))
  )
})
