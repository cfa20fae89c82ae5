import { NodeRuntime } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import * as S from "../config/Settings.js"
import { layerTracing } from "../tracing/Tracing.js"
import { withEmbeddedSimulator } from "./EmbeddedSimulator.js"
import { layerLogging } from "./Logging.js"
import { RunnerLive } from "./Runner.js"
import { allAreas } from "./settings.js"
import { checkListener } from "./startChecks.js"

/**
 * Every setting is read and checked before any layer is built (no database work, no port bound): an invalid value
 * stops the runner with one line naming its variable, e.g. `config: AUTH_SECRET: must be at least 32 characters`.
 * So does a combination that is unsafe (startChecks.ts: a non-loopback HTTP_HOST without AUTH_SECRET).
 */
const configInvalid = (line: string) =>
  Effect.sync(() => {
    process.stderr.write(`config: ${line}\n`)
    process.exit(1)
  })

S.validateAll(allAreas).pipe(
  Effect.zipRight(
    checkListener.pipe(
      Effect.provide(layerLogging),
      Effect.mapError((e) => typeof e === "string" ? e : S.describe(e))
    )
  ),
  Effect.matchEffect({
    onFailure: configInvalid,
    onSuccess: () =>
      Layer.launch(withEmbeddedSimulator(RunnerLive)).pipe(Effect.provide(layerTracing), Effect.provide(layerLogging))
  }),
  NodeRuntime.runMain
)
