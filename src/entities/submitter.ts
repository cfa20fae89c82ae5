import { Clock, Duration, Effect, Either, Metric, Option } from "effect"
import * as Steps from "../domain/lifecycleSteps.js"
import type { TaskState } from "../domain/taskState.js"
import { unknownSubmitsResolved } from "../observability/metrics.js"
import type { AttemptSchedule } from "../persistence/AttemptSchedule.js"
import type { WriteFence } from "../persistence/WriteFence.js"
import { isProviderFault } from "../providers/errors.js"
import type { ProviderClients } from "../providers/ProviderClients.js"
import type { ProviderBreaker } from "../quota/ProviderBreaker.js"
import type { ProviderQuota } from "../quota/ProviderQuota.js"
import type { makeBreakerWaits } from "./breakerWaits.js"
import type { makePoller } from "./poller.js"
import { commitStep as commit, lifecycleMeta as meta, type TaskHandle } from "./taskHandle.js"

export interface SubmitterDeps {
  readonly clients: ProviderClients
  readonly schedule: AttemptSchedule
  readonly quota: ProviderQuota
  readonly breaker: ProviderBreaker
  /** where a task the breaker refused waits: one look per route on this runner instead of one per task */
  readonly waits: Effect.Effect.Success<ReturnType<typeof makeBreakerWaits>>
  readonly fence: WriteFence
  readonly poller: ReturnType<typeof makePoller>
  readonly config: {
    readonly submitConcurrency: number
    readonly maxSubmitAttempts: number
    readonly submitUnknownGrace: Duration.Duration
    readonly submitUnknownDeadline: Duration.Duration
  }
  /** Seconds of the seed's scale as jittered milliseconds of this deployment's scale. */
  readonly scaled: (seconds: number) => number
  readonly retryDelay: (n: number, capSeconds: number) => number
}

/** Each look at a submission the mode's gate held back (QUEUE_ONLY, RECONCILE_ONLY, DEGRADED_PROVIDER's providers…). */
export const submissionsHeld = Metric.counter("submissions_held_by_mode_total", {
  description: "looks at a due submission that the system mode held back (looked at again within a second)",
  incremental: true
})

/**
 * The submission half of a task's lifecycle (seed 12.7.5): a slot, the SUBMITTING commit before the call,
 * then submitted, unknown or a new attempt; an unknown outcome is resolved by lookup by our idempotency key,
 * never by submitting again before the provider confirms it has nothing. While the provider and model's breaker is
 * open (src/quota/ProviderBreaker.ts) nothing is sent: the task stays queued, looked at again when it may half-open.
 */
export const makeSubmitter = (
  { breaker, clients, config, fence, poller, quota, retryDelay, schedule, scaled, waits }: SubmitterDeps
) => {
  const submit = (h: TaskHandle, s: TaskState) =>
    Effect.gen(function*() {
      const attempt = s.attempt!
      const client = clients.get(attempt.provider)
      if (Option.isNone(client)) {
        yield* Effect.logError("no client for this provider: the task cannot be submitted")
        return yield* commit(h, (st, now) => Steps.retrySubmission(st, attempt.id, 0, "invalid_input", now, meta(h)))
      }
      // the mode's submission gate (src/domain/systemModes.ts), per provider in DEGRADED_PROVIDER; looked at again
      // within a second, so a mode change resumes submissions without waiting out a long sleep
      if (!(yield* fence.allows("submission", attempt.provider))) {
        yield* Metric.increment(Metric.tagged(submissionsHeld, "provider", attempt.provider))
        return Math.min(scaled(5), 1000)
      }
      const route = { provider: attempt.provider, model: attempt.model }
      // refused: the task waits for the runner's one look per route (breakerWaits.ts), which wakes it once the breaker
      // admits again (an operator's reset included). Its own timer is only a safety net: at the breaker's wait, every
      // task refused meanwhile would wake at once when it half-opens
      const looked = yield* breaker.admit(route, "submit", false)
      if (looked._tag === "Refused") {
        yield* waits.wait(route, h.taskId, h.wake)
        return scaled(60)
      }
      const scope = `${attempt.provider}/${attempt.model}/${s.task.tenantId}`
      if (!(yield* schedule.acquireSlot(scope, attempt.id, config.submitConcurrency))) {
        return scaled(3)
      }
      // admitted before SUBMITTING is committed: a refusal after it would leave a submit that was never sent looking
      // like one of unknown outcome
      const admission = yield* breaker.admit(route, "submit")
      if (admission._tag === "Refused") return Math.min(admission.waitMs, scaled(5))
      const begun = yield* h.apply((st, now) => Steps.beginSubmit(st, now, meta(h)))
      if (begun.outcome !== "changed") return 0
      const request = yield* schedule.requestOf(h.taskId)
      const result = yield* client.value.submit({
        attemptId: attempt.id,
        clientRequestId: attempt.clientRequestId,
        model: attempt.model,
        prompt: request.prompt,
        durationSeconds: request.durationSeconds,
        resolution: request.resolution
      }).pipe(Effect.either)
      yield* breaker.record(route, admission.probe, Either.isLeft(result) && isProviderFault(result.left))
      if (Either.isRight(result)) {
        yield* h.apply((st, now) => Steps.submitAccepted(st, attempt.id, result.right.providerTaskId, now, meta(h)))
        yield* schedule.schedule(attempt.id, poller.firstPollMs())
        h.scheduleMemo = null
        return 0
      }
      const error = result.left
      yield* Effect.logWarning("submission did not go through", error)
      if (error._tag === "SubmitUnknown") {
        return yield* commit(h, (st, now) => Steps.submitUnknown(st, attempt.id, now, meta(h)))
      }
      // a 429 is worth another attempt later; any other refusal is about the request itself
      const retryable = error.code === "http_429"
      return yield* commit(
        h,
        (st, now) =>
          Steps.retrySubmission(
            st,
            attempt.id,
            retryable ? config.maxSubmitAttempts : 0,
            retryable ? "provider_unavailable" : "invalid_input",
            now,
            meta(h)
          ),
        retryDelay(attempt.attemptNo, 60)
      )
    })

  /** SUBMIT_UNKNOWN: ask the provider by our idempotency key; never a new attempt until it confirms nothing. */
  const resolveUnknown = (h: TaskHandle, s: TaskState) =>
    Effect.gen(function*() {
      const attempt = s.attempt!
      if (attempt.submitState === "SUBMITTING") {
        return yield* commit(h, (st, now) => Steps.submitUnknown(st, attempt.id, now, meta(h)))
      }
      const now = yield* Clock.currentTimeMillis
      const since = (attempt.unknownSince ?? attempt.submitStartedAt ?? s.task.updatedAt).getTime()
      const client = yield* clients.get(attempt.provider)
      // a lookup is a query: not sent while the route's breaker is open (it is not counted either: a provider
      // without lookups answers without a call)
      const looked = yield* breaker.admit({ provider: attempt.provider, model: attempt.model }, "lookup", false)
      if (looked._tag === "Refused") return looked.waitMs
      yield* quota.acquire({ provider: attempt.provider, tenantId: s.task.tenantId })
      const found = yield* client.lookup(attempt.clientRequestId).pipe(Effect.either)
      if (Either.isRight(found)) {
        if (Option.isSome(found.right)) {
          const providerTaskId = found.right.value
          const bound = yield* h.apply((st, at) => Steps.submitAccepted(st, attempt.id, providerTaskId, at, meta(h)))
          if (bound.outcome === "changed") {
            yield* Metric.increment(
              Metric.tagged(Metric.tagged(unknownSubmitsResolved, "provider", attempt.provider), "via", "lookup")
            )
          }
          yield* schedule.schedule(attempt.id, poller.firstPollMs())
          h.scheduleMemo = null
          return 0
        }
        const graceMs = Duration.toMillis(config.submitUnknownGrace)
        if (now - since < graceMs) return graceMs - (now - since) + scaled(1)
        return yield* commit(h, (st, at) =>
          Steps.retrySubmission(st, attempt.id, config.maxSubmitAttempts, "provider_unavailable", at, meta(h)))
      }
      if (found.left._tag === "LookupUnsupported") {
        if (now - since > Duration.toMillis(config.submitUnknownDeadline)) {
          yield* Effect.logError("unknown submission could not be resolved: manual review")
          return yield* commit(h, (st, at) =>
            Steps.escalate(st, at, meta(h)))
        }
        return scaled(30)
      }
      yield* Effect.logWarning("lookup by idempotency key failed", found.left)
      return poller.failureDelayMs(found.left, 1)
    })

  return { submit, resolveUnknown } as const
}
