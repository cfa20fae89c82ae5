import { Effect, Metric } from "effect"
import { callbackReorders, taskObservations } from "../observability/metrics.js"
import type { ProviderObservation } from "../schema/observation.js"
import type { CommandResult } from "./GenerationTask.js"

/** Outcomes that mean the observation came after a newer fact of its task: it arrived out of order. */
const REORDERED: ReadonlySet<string> = new Set(["stale_sequence", "backward", "progress_backward"])

/**
 * Counts what the transition function made of one provider observation: by provider, source and outcome (changed,
 * conflict, or the reason it changed nothing: duplicate, stale_sequence, terminal ...); callbacks that came out of
 * order also as reorders (seed 12.11.6).
 */
export const countObservation = (observation: ProviderObservation, result: CommandResult) =>
  Effect.gen(function*() {
    // a conflict's reason is prose ("failed after ready"): the label says conflict, the log line says which
    const outcome = result.outcome === "changed" || result.outcome === "conflict"
      ? result.outcome
      : (result.reason ?? result.outcome)
    const byProvider = Metric.tagged(taskObservations, "provider", observation.provider)
    yield* Metric.increment(
      Metric.tagged(Metric.tagged(byProvider, "source", observation.source), "outcome", outcome)
    )
    if (observation.source === "webhook" && REORDERED.has(outcome)) {
      yield* Metric.increment(Metric.tagged(callbackReorders, "provider", observation.provider))
    }
  })
