import { HttpApiBuilder } from "@effect/platform"
import { ControlPlaneApi } from "../Api.js"

export const OperationsHttpLive = HttpApiBuilder.group(ControlPlaneApi, "operations", (handlers) => handlers)
