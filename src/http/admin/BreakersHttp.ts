import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Effect, Option } from "effect"
import { OperatorAudit } from "../../persistence/OperatorAudit.js"
import { providerNames } from "../../providers/providers.js"
import { ProviderBreaker } from "../../quota/ProviderBreaker.js"
import { NotFound, OperationRefused, StorageUnavailable } from "../../schema/errors.js"
import { trusted } from "../../schema/task.js"
import { ControlPlaneApi } from "../Api.js"
import { BreakerRow, BreakersView, ResetBreaker, ResetBreakersView } from "./BreakersApi.js"
import { Operator } from "./OperatorAuth.js"

/** The breakers group (src/http/admin/BreakersApi.ts): a reset names its operator in operator_audit. */
export const BreakersHttpLive = HttpApiBuilder.group(
  ControlPlaneApi,
  "breakers",
  (handlers) =>
    Effect.gen(function*() {
      const breaker = yield* ProviderBreaker
      const audit = yield* OperatorAudit
      return handlers
        .handle("list", () =>
          Effect.map(breaker.list, ({ breakers, shared }) =>
            new BreakersView({
              shared,
              breakers: breakers.map((b) => new BreakerRow(b, trusted))
            }, trusted)))
        .handle("reset", ({ payload }) =>
          Effect.gen(function*() {
            const { operator } = yield* Operator
            if (!providerNames.includes(payload.provider)) {
              return yield* new OperationRefused({
                message: `unknown provider ${payload.provider}: one of ${providerNames.join(", ")}`
              })
            }
            const model = Option.fromNullable(payload.model)
            const reset = yield* breaker.reset(payload.provider, model)
            const subject = `${payload.provider}/${payload.model ?? "all models"}`
            if (reset.length === 0) {
              return yield* new NotFound({ message: `no breaker of ${subject} is known` })
            }
            yield* audit.record({
              operator,
              what: "breaker.reset",
              subject,
              from: reset.map((r) => `${r.model}: ${r.from}`).join(", ").slice(0, 500),
              to: "closed",
              reason: payload.reason
            }).pipe(
              Effect.catchAll((e) =>
                Effect.zipRight(
                  Effect.logError("writing the audit row failed", e),
                  Effect.fail(new StorageUnavailable({ message: "the breakers were reset, but the audit row failed" }))
                )
              )
            )
            yield* Effect.logInfo("operator reset provider breakers").pipe(
              Effect.annotateLogs({ operator, provider: payload.provider, model: payload.model ?? "*all*" })
            )
            return new ResetBreakersView({ reset: reset.map((r) => new ResetBreaker(r, trusted)) }, trusted)
          }))
    })
)
