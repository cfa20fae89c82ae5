import { Effect, Option } from "effect"
import { isLoopbackHost } from "../config/loopback.js"
import * as S from "../config/Settings.js"
import { AuthSettings } from "../http/Auth.js"
import { RunnerSettings } from "./RunnerConfig.js"

/**
 * Without AUTH_SECRET the runner signs tokens with a development secret that is written in this repository, and hands
 * a development session to whoever asks (POST /v1/dev/session): right for `npm start` on one machine, never on a
 * network. So without a secret it listens on loopback only and says so; told to listen on any other address, it
 * refuses to start (a `config:` line naming AUTH_SECRET, before any database work or bound port).
 */
export const checkListener: Effect.Effect<void, string> = Effect.gen(function*() {
  const { httpHost } = yield* RunnerSettings.config
  const { secret } = yield* AuthSettings.config
  if (Option.isSome(secret)) return
  if (!isLoopbackHost(httpHost)) {
    return yield* Effect.fail(`AUTH_SECRET: must be set when HTTP_HOST (${httpHost}) is not a loopback address`)
  }
  yield* Effect.logWarning(
    "AUTH_SECRET is unset: development mode (development token secret and sessions), listening on loopback only"
  ).pipe(Effect.annotateLogs({ http_host: httpHost }))
}).pipe(Effect.catchTag("ConfigError", (e) => Effect.fail(S.describe(e))))
