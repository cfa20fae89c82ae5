import { FetchHttpClient, HttpApiClient, HttpClient, HttpClientRequest } from "@effect/platform"
import { Effect } from "effect"
import { ControlPlaneApi } from "../../src/http/Api.js"
import { TokenSigner } from "../../src/http/Auth.js"

/** The admin API's typed client at `baseUrl`, with an operator token for `operator` (what the ops CLI uses). */
export const adminClient = (baseUrl: string, operator = "ops-test") =>
  Effect.gen(function*() {
    const token = yield* Effect.flatMap(TokenSigner, (s) => s.signOperator(operator))
    return yield* HttpApiClient.make(ControlPlaneApi, {
      baseUrl,
      transformClient: HttpClient.mapRequest(HttpClientRequest.bearerToken(token))
    })
  }).pipe(Effect.provide(FetchHttpClient.layer))
