import * as HttpClient from "@effect/platform/HttpClient"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import { Clock, Effect, Option, Redacted } from "effect"
import { LookupUnsupported } from "./errors.js"
import { type ProviderClient } from "./ProviderDefinition.js"
import { providers } from "./providers.js"
import { CallbackTokenSettings, ProviderSettings } from "./ProviderSettings.js"
import { callbackQuery } from "./signatures.js"
import { simulatorLookup } from "./simulatorLookup.js"
import { makeTransport } from "./transport.js"

/** Provider output URLs are pre-signed or public: our API key is never sent to them. */
const publicOutput = (ref: string): Option.Option<HttpClientRequest.HttpClientRequest> =>
  /^https?:\/\//.test(ref) ? Option.some(HttpClientRequest.get(ref)) : Option.none()

/** The clients of every provider in the list, each from its definition and its <NAME>_* settings. */
export class ProviderClients extends Effect.Service<ProviderClients>()("ProviderClients", {
  effect: Effect.gen(function*() {
    const http = yield* HttpClient.HttpClient
    const settings = yield* ProviderSettings.config
    const { secrets } = yield* CallbackTokenSettings.config
    const current = secrets.find((s) => s.version === "current")
    // one mechanism for every provider whose callback URL is set per request: the attempt and its signed token
    const callbackUrlOf = (provider: string, webhookUrl: string) => (attemptId: string) =>
      current === undefined ? Effect.succeed(webhookUrl) : Effect.map(
        Clock.currentTimeMillis,
        (now) => `${webhookUrl}?${callbackQuery(current.secret, provider, attemptId, new Date(now))}`
      )

    const clients = new Map(providers.map((d): [string, ProviderClient] => {
      const s = settings.clients[d.name]!
      const transport = makeTransport({
        provider: d.name,
        http,
        baseUrl: s.baseUrl,
        timeout: settings.timeout,
        headers: {
          ...d.headers,
          ...Option.match(s.apiKey, { onNone: () => ({}), onSome: (k) => d.authHeaders(Redacted.value(k)) })
        }
      })
      const webhookUrl = `${settings.publicBaseUrl}/webhooks/${d.name}`
      const core = s.client({ transport, webhookUrl, callbackUrl: callbackUrlOf(d.name, webhookUrl) })
      const lookup = core.lookup ?? (s.lookup ? simulatorLookup(transport) : undefined)
      return [d.name, {
        submit: core.submit,
        query: core.query,
        cancel: core.cancel,
        lookup: lookup ?? (() => Effect.fail(new LookupUnsupported({ provider: d.name }))),
        outputRequest: (ref) => Option.orElse(core.outputRequest?.(ref) ?? Option.none(), () => publicOutput(ref)),
        outputHosts: s.outputHosts
      }]
    }))
    return {
      get: (provider: string): Option.Option<ProviderClient> => Option.fromNullable(clients.get(provider))
    } as const
  })
}) {}
