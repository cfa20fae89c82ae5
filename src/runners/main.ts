import { NodeRuntime } from "@effect/platform-node"
import { Config, Effect, Layer, Logger, LogLevel } from "effect"
import { RunnerLive } from "./Runner.js"

const LogLevelLive = Layer.unwrapEffect(
  Effect.map(Config.logLevel("LOG_LEVEL").pipe(Config.withDefault(LogLevel.Info)), Logger.minimumLogLevel)
)

Layer.launch(RunnerLive).pipe(Effect.provide(LogLevelLive), NodeRuntime.runMain)
