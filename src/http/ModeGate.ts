import { Effect, Layer } from "effect"
import { allows, type ModeGates } from "../domain/systemModes.js"
import { WEBHOOK_PREFIX } from "../intake/Webhooks.js"
import { WriteFence } from "../persistence/WriteFence.js"
import { RawRoutes } from "./RawRoutes.js"
import { EVENTS_PATH } from "./StreamAuth.js"

/** What a path needs of the mode; health, metrics, the admin API, the pages and the docs need nothing. */
const gateOf = (path: string): keyof ModeGates | undefined =>
  path.startsWith(WEBHOOK_PREFIX)
    ? "webhookIntake"
    : EVENTS_PATH.test(path)
    ? "liveNotifications"
    : path.startsWith("/v1/")
    ? "reads"
    : undefined

/**
 * The system mode's gates at the HTTP edge (src/domain/systemModes.ts), before any route: in MAINTENANCE the API and
 * the webhooks answer 503 (providers retry their callbacks); while live notifications are paused (DEGRADED_NOTIFY)
 * a stream is refused with 503, so the browser client polls snapshots until streams open again. Every refusal names
 * the mode. Admission and task writes are gated where they happen, inside their transactions.
 */
export const ModeGateLive = Layer.effectDiscard(Effect.gen(function*() {
  const routes = yield* RawRoutes
  const fence = yield* WriteFence
  yield* routes.gate((path) => {
    const gate = gateOf(path)
    if (gate === undefined) return undefined
    const { degradedProviders, mode } = fence.view()
    if (allows(mode, gate, degradedProviders)) return undefined
    const what = gate === "liveNotifications" ? "live updates are paused: read task snapshots" : "unavailable"
    return {
      status: 503,
      body: { _tag: "ModeUnavailable", mode, message: `${what} (mode ${mode})` },
      retryAfterSeconds: 30
    }
  })
}))
