import { Effect, Metric } from "effect"
import {
  callbackReorders,
  lateAttemptResults,
  taskObservations,
  unknownSubmitsResolved
} from "../observability/metrics.js"
import { seriesBy } from "../observability/series.js"
import type { ProviderObservation } from "../schema/observation.js"
import type { CommandResult } from "./GenerationTask.js"

/** Outcomes that mean the observation came after a newer fact of its task: it arrived out of order. */
const REORDERED: ReadonlySet<string> = new Set(["stale_sequence", "backward", "progress_backward"])

const observations = seriesBy(taskObservations, "provider", "source", "outcome")
const reorders = seriesBy(callbackReorders, "provider")

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
    yield* Metric.increment(observations(observation.provider, observation.source, outcome))
    if (observation.source === "webhook" && REORDERED.has(outcome)) {
      yield* Metric.increment(reorders(observation.provider))
    }
  })

/**
 * An observation gave its job to an attempt whose submit response never came (SUBMITTING or SUBMIT_UNKNOWN, no
 * provider task id): the provider's webhook, its URL naming the attempt, resolved an unknown submit. The task goes
 * on from the provider's facts, with no lookup, no second job and no manual review.
 */
export const countUnknownSubmitBound = (observation: ProviderObservation) =>
  Effect.logInfo("unknown submit resolved by the provider's own callback").pipe(
    Effect.annotateLogs({
      attempt_id: observation.attemptId,
      provider_task_id: observation.providerTaskId,
      source: observation.source
    }),
    Effect.zipRight(Metric.increment(
      Metric.tagged(Metric.tagged(unknownSubmitsResolved, "provider", observation.provider), "via", observation.source)
    ))
  )

const PROVIDER_TERMINAL: ReadonlySet<string> = new Set(["succeeded", "failed", "canceled"])

/**
 * A superseded attempt's observation (seed 12.7.3): a terminal one is kept for cost reconciliation by `record` (once
 * per attempt and status), counted and logged; a progress report of an old attempt is only the observation count.
 * The task is never touched: adopting an old attempt's result is an explicit business decision, not "who came last".
 */
export const recordLateResult = <E, R>(observation: ProviderObservation, record: Effect.Effect<boolean, E, R>) =>
  Effect.gen(function*() {
    if (!PROVIDER_TERMINAL.has(observation.status)) return
    const fresh = yield* record
    yield* Metric.increment(
      Metric.tagged(
        Metric.tagged(
          Metric.tagged(lateAttemptResults, "provider", observation.provider),
          "status",
          observation.status
        ),
        "outcome",
        fresh ? "recorded" : "duplicate"
      )
    )
    if (fresh) {
      yield* Effect.logInfo(`late ${observation.status} of superseded attempt recorded for cost reconciliation`).pipe(
        Effect.annotateLogs({
          attempt_id: observation.attemptId,
          provider: observation.provider,
          provider_task_id: observation.providerTaskId ?? "",
          source: observation.source
        })
      )
    }
  })
