import { HttpApiBuilder } from "@effect/platform"
import { ControlPlaneApi } from "../Api.js"

export const ClusterHttpLive = HttpApiBuilder.group(ControlPlaneApi, "cluster", (handlers) => handlers)
