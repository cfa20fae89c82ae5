import { Effect, Layer, Logger, LogLevel } from "effect"
import * as S from "../config/Settings.js"

export const LoggingSettings = S.area("Logging", "what the runner logs", {
  level: S.logLevel(
    "LOG_LEVEL",
    "least severe level logged: ALL, TRACE, DEBUG, INFO, WARN, ERROR, FATAL, OFF (any case)",
    LogLevel.Info
  )
})

export const layerLogLevel = Layer.unwrapEffect(
  Effect.map(LoggingSettings.config, (c) => Logger.minimumLogLevel(c.level))
)
