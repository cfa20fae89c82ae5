import { NodeRuntime } from "@effect/platform-node"
import { Context, Effect, Layer } from "effect"
import * as S from "../config/Settings.js"
import { HealthSettings } from "../http/Health.js"
import { RunnerState } from "../http/RunnerState.js"
import { withEmbeddedSimulator } from "./EmbeddedSimulator.js"
import { layerLogLevel } from "./Logging.js"
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

/**
 * A repeated signal. runMain listens for the first one only; with no listener left, Node's default action would end
 * the process on the next. But a terminal's Ctrl-C reaches the runner twice under `npm start` (from the terminal to
 * the whole process group, and again from npm, which forwards it), which must not cut the graceful stop short. So a
 * repeat within a second of the first is ignored; a later one ends the process at once (exit 130), for a stop that
 * takes too long.
 */
const onRepeatedSignal = () => {
  let first: number | undefined
  const handle = (signal: NodeJS.Signals) => {
    const now = Date.now()
    if (first === undefined) return void (first = now)
    if (now - first < 1_000) return
    process.stderr.write(`${signal} again: exiting without finishing the graceful stop\n`)
    process.exit(130)
  }
  process.on("SIGINT", handle)
  process.on("SIGTERM", handle)
}
onRepeatedSignal()

S.validateAll(allAreas).pipe(
  Effect.zipRight(
    checkListener.pipe(
      Effect.provide(layerLogLevel),
      Effect.mapError((e) => typeof e === "string" ? e : S.describe(e))
    )
  ),
  Effect.matchEffect({
    onFailure: configInvalid,
    onSuccess: () => serve.pipe(Effect.provide(layerLogLevel))
  }),
  NodeRuntime.runMain
)
