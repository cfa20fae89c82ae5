import { NodeRuntime } from "@effect/platform-node"
import { Config, Effect, Layer, Logger, LogLevel } from "effect"
import { withEmbeddedSimulator } from "../simulator/embedded.js"
import { RunnerLive } from "./Runner.js"

const LogLevelLive = Layer.unwrapEffect(
  Effect.map(Config.logLevel("LOG_LEVEL").pipe(Config.withDefault(LogLevel.Info)), Logger.minimumLogLevel)
)

Layer.launch(withEmbeddedSimulator(RunnerLive)).pipe(Effect.provide(LogLevelLive), NodeRuntime.runMain)
