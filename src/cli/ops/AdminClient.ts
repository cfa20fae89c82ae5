import { NodeHttpClient } from "@effect/platform-node"
import * as HttpApiClient from "@effect/platform/HttpApiClient"
import * as HttpClient from "@effect/platform/HttpClient"
import * as HttpClientError from "@effect/platform/HttpClientError"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import { Cause, Duration, Effect, Layer, Option, Redacted } from "effect"
import * as os from "node:os"
import * as S from "../../config/Settings.js"
import { ControlPlaneApi } from "../../http/Api.js"
import { TokenSigner } from "../../http/Auth.js"

export const OpsCliSettings = S.area(
  "Ops CLI",
  "where `npm run ops` finds a runner's admin API (the CLI's, not the runner's)",
  {
    url: S.string("OPS_URL", "base URL of a runner's HTTP API", "http://127.0.0.1:3000"),
    token: S.secret(
      "OPS_TOKEN",
      "operator token (npm run token -- --operator NAME); unset: the CLI signs one with AUTH_SECRET (or the development secret) as the local user"
    ),
    timeout: S.duration("OPS_TIMEOUT", "how long one admin request may take before the CLI gives up", "15 seconds")
  }
)

/**
 * The admin API's typed client, authenticated with an operator token, each request bounded by OPS_TIMEOUT (a silent
 * runner gives an error line, never a hang).
 */
export class AdminClient extends Effect.Service<AdminClient>()("AdminClient", {
  effect: Effect.gen(function*() {
    const { timeout, token, url } = yield* OpsCliSettings.config
    const bearer = Option.isSome(token)
      ? Redacted.value(token.value)
      : yield* Effect.flatMap(TokenSigner, (s) => s.signOperator(`cli:${os.userInfo().username}`, 300))
    return yield* HttpApiClient.make(ControlPlaneApi, {
      baseUrl: url,
      transformClient: (client) =>
        client.pipe(
          HttpClient.mapRequest(HttpClientRequest.bearerToken(bearer)),
          HttpClient.transform((response, request) =>
            Effect.timeoutFail(response, {
              duration: timeout,
              onTimeout: () =>
                new HttpClientError.RequestError({
                  request,
                  reason: "Transport",
                  description: `no answer within ${Duration.format(timeout)}`
                })
            })
          )
        )
    })
  }),
  dependencies: [NodeHttpClient.layerUndici, TokenSigner.Default]
}) {}

/**
 * One readable line for any failure: the API's own message (a tagged error's fields), the address that did not
 * answer, or the invalid argument; never a stack trace.
 */
export const describeFailure = (cause: Cause.Cause<unknown>): string => {
  const failure = Cause.squash(cause) as { _tag?: string; message?: string; reason?: { _tag?: string } }
  if (failure?._tag === "RequestError" || failure?._tag === "ResponseError") {
    const e = failure as { message: string; description?: string; reason?: { _tag?: string } }
    return `${e.reason ?? "request failed"}: ${e.description ?? e.message}`
  }
  if (typeof failure?.message === "string" && failure.message.length > 0) {
    return failure._tag && failure._tag !== "Error" ? `${failure._tag}: ${failure.message}` : failure.message
  }
  return failure?._tag ?? String(failure)
}

export const layerAdminClient = Layer.orDie(AdminClient.Default)
