import { NodeRuntime } from "@effect/platform-node"
import { Context, Effect, Layer } from "effect"
import * as S from "../config/Settings.js"
import { HealthSettings } from "../http/Health.js"
import { RunnerState } from "../http/RunnerState.js"
import { layerTracing } from "../tracing/Tracing.js"
import { withEmbeddedSimulator } from "./EmbeddedSimulator.js"
import { layerLogging } from "./Logging.js"
import { RunnerLive } from "./Runner.js"
import { allAreas } from "./settings.js"
import { onRepeatedSignal } from "./signals.js"
import { checkListener, checkRoles } from "./startChecks.js"

/**
 * Every setting is read and checked before any layer is built (no database work, no port bound): an invalid value
 * stops the runner with one line naming its variable, e.g. `config: AUTH_SECRET: must be at least 32 characters`.
 * So does a combination that is unsafe or impossible (startChecks.ts: a non-loopback HTTP_HOST without AUTH_SECRET;
 * RUNNER_ROLES that cannot work with the services configured).
 */
const configInvalid = (line: string) =>
  Effect.sync(() => {
    process.stderr.write(`config: ${line}\n`)
    process.exit(1)
  })

/**
 * The runner until it is interrupted (NodeRuntime.runMain interrupts on SIGTERM and SIGINT). Readiness turns on once
 * everything is built (the probes answer before the API does). On a signal the scope closes in reverse order of
 * building, so the finalizer added here, after everything was built, runs first: readiness off (`/readyz` answers 503
 * at once), READINESS_GRACE for load balancers to notice, and only then the rest: the HTTP listener closes, the
 * cluster hands its shards over, the database closes.
 */
const serve = Effect.scoped(Effect.gen(function*() {
  const built = yield* Layer.build(withEmbeddedSimulator(RunnerLive))
  const state = Context.get(built, RunnerState)
  const { grace } = yield* HealthSettings.config
  yield* Effect.addFinalizer(() => Effect.zipRight(state.setStopping, Effect.sleep(grace)))
  yield* state.setStarted
  return yield* Effect.never
}))

onRepeatedSignal()

S.validateAll(allAreas).pipe(
  Effect.zipRight(
    Effect.gen(function*() {
      const logRoles = yield* checkRoles
      yield* checkListener
      yield* logRoles
    }).pipe(
      Effect.provide(layerLogging),
      Effect.mapError((e) => typeof e === "string" ? e : S.describe(e))
    )
  ),
  Effect.matchEffect({
    onFailure: configInvalid,
    onSuccess: () => serve.pipe(Effect.provide(layerTracing), Effect.provide(layerLogging))
  }),
  NodeRuntime.runMain
)
