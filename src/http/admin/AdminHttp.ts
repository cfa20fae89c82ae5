import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Effect } from "effect"
import { ControlPlaneApi } from "../Api.js"
import { OperatorView } from "./AdminApi.js"
import { Operator } from "./OperatorAuth.js"

export const AdminHttpLive = HttpApiBuilder.group(
  ControlPlaneApi,
  "admin",
  (handlers) => handlers.handle("whoami", () => Effect.map(Operator, (o) => new OperatorView(o)))
)
