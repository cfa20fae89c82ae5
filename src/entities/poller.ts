import { Clock, Duration, Effect, Either, Metric, Option } from "effect"
import { providerLostJob } from "../domain/lifecycleSteps.js"
import { firstPoll, nextPollAfterFailure, nextPollAfterSuccess, type PollPolicy } from "../domain/pollPolicy.js"
import type { TaskState } from "../domain/taskState.js"
import { providerPolls } from "../observability/metrics.js"
import { seriesBy } from "../observability/series.js"
import type { AttemptSchedule, PollLease, PollSchedule } from "../persistence/AttemptSchedule.js"
import { isProviderFault, type ProviderCallFailed } from "../providers/errors.js"
import type { ProviderReport } from "../providers/ProviderAdapter.js"
import { sha256hex } from "../providers/ProviderAdapter.js"
import type { ProviderClients } from "../providers/ProviderClients.js"
import type { ProviderBreaker } from "../quota/ProviderBreaker.js"
import type { ProviderQuota } from "../quota/ProviderQuota.js"
import type { AttemptId } from "../schema/ids.js"
import { ProviderObservation } from "../schema/observation.js"
import { type AttemptSnapshot, isTerminal, type TaskStatus, trusted } from "../schema/task.js"
import type { TaskHandle } from "./taskHandle.js"

const polls = seriesBy(providerPolls, "provider", "outcome")

/** A poll's answer as an observation: the same shape and the same transition as a webhook's. */
export const pollObservation = (
  attempt: AttemptSnapshot,
  report: ProviderReport,
  receivedAt: Date,
  traceId: string
): ProviderObservation =>
  new ProviderObservation({
    provider: attempt.provider,
    providerEventId: null,
    // one reconciliation record per contradictory status, however often polls repeat it
    dedupKey: `poll:${report.providerTaskId ?? attempt.providerTaskId}:${report.status}`,
    providerTaskId: report.providerTaskId ?? attempt.providerTaskId,
    clientRequestId: report.clientRequestId,
    attemptId: attempt.id,
    providerSequence: report.providerSequence,
    providerOccurredAt: report.providerUpdatedAt,
    receivedAt,
    status: report.status,
    stage: report.stage,
    progress: report.progress,
    errorClass: report.errorClass,
    errorCode: report.errorCode,
    outputRefs: report.outputRefs,
    source: "poll",
    payloadHash: sha256hex(JSON.stringify(report)),
    traceId
  }, trusted)

export interface PollerDeps {
  readonly clients: ProviderClients
  readonly schedule: AttemptSchedule
  readonly quota: ProviderQuota
  readonly breaker: ProviderBreaker
  readonly config: {
    readonly policy: PollPolicy
    readonly pollLease: Duration.Duration
    readonly idleQuotaWait: Duration.Duration
  }
}

/**
 * What a poll knows of its schedule without reading it again (TaskHandle.scheduleMemo), from a read of it at `now`:
 * AttemptSchedule.get's, or the one a task's load made with its state (an entity built to poll then reads nothing
 * more before its claim). Null when that read leaves the poll something to do first: no poll scheduled yet, or
 * another holder's lease to wait out.
 */
export const scheduleMemoOf = (
  attemptId: AttemptId,
  schedule: PollSchedule,
  now: number
): TaskHandle["scheduleMemo"] =>
  schedule.nextPollAt === null || (schedule.pollLeaseUntil !== null && schedule.pollLeaseUntil.getTime() > now)
    ? null
    : { attemptId, nextPollAt: schedule.nextPollAt.getTime(), failures: schedule.pollFailures }

/** Statuses whose lifecycle step is a poll (cancel_requested asks the provider first: TaskLifecycle.step). */
export const keepsPolling = (status: TaskStatus) =>
  status === "submitted" || status === "running" || status === "provider_status_unknown"

/** A poll's answer to the lifecycle: due, but its quota slot is further than TASK_IDLE_QUOTA_WAIT (go idle). */
export const QUOTA_DEFERRED = -1

/**
 * The polling half of a task's lifecycle (seed 12.8.3–12.8.4): waits for the attempt's next_poll_at, takes a
 * quota token, holds the attempt's poll lease in PostgreSQL during the query, feeds the answer through the
 * entity, and schedules the next poll by state and error class. Every query goes through the provider and model's
 * breaker (src/quota/ProviderBreaker.ts): while it is open the poll is put off, unsent and without a quota slot;
 * 401/403 open the provider credential's breaker for every task on this runner; malformed answers are quarantined
 * (kept in last_poll_error, never applied).
 */
export const makePoller = ({ breaker, clients, config, quota, schedule }: PollerDeps) => {
  const policy = config.policy
  const leaseMs = Duration.toMillis(config.pollLease)
  const quotaWaitMs = Duration.toMillis(config.idleQuotaWait)

  /**
   * The route's breaker is open: the poll waits until it may half-open (spread over a fifth more, at most 5 s, so
   * the waiting tasks do not all ask at once), written to PostgreSQL too, so the sweeper and a new owner agree.
   */
  const putOff = (h: TaskHandle, attemptId: AttemptId, waitMs: number, failures: number) =>
    Effect.gen(function*() {
      const delay = Math.ceil(waitMs + Math.random() * Math.min(waitMs / 5, 5000))
      yield* schedule.schedule(attemptId, delay)
      h.scheduleMemo = { attemptId, nextPollAt: (yield* Clock.currentTimeMillis) + delay, failures }
      return delay
    })

  const failureDelayMs = (error: ProviderCallFailed, failures: number) => nextPollAfterFailure(error, failures, policy)

  /**
   * When the poll just finished is due again, on this runner's clock: `delay` from now, read once `finish` has
   * returned. finish wrote next_poll_at as its own statement's now() + delay, so a time read before it (before the
   * observation's commit, say) is early by however long the commit and finish took: measured under load, seconds.
   * The entity then woke early, took a quota slot, lost the claim (not due yet in PostgreSQL), waited a second, read
   * the schedule and took a second slot for the same poll (bench:polling: 46–57 grants/s for 15–33 polls/s).
   */
  const dueAfterFinish = (delay: number) => Effect.map(Clock.currentTimeMillis, (at) => at + delay)

  const poll = (h: TaskHandle, s: TaskState) => {
    // the lease this poll holds between claim and finish: given back if the poll is interrupted (a drain or a
    // SIGTERM moves the entity), else the next owner would wait out POLL_LEASE before polling the task again
    let held: PollLease | null = null
    return Effect.gen(function*() {
      const attempt = s.attempt!
      const route = { provider: attempt.provider, model: attempt.model }
      let now = yield* Clock.currentTimeMillis
      let memo = h.scheduleMemo?.attemptId === attempt.id ? h.scheduleMemo : null
      if (memo === null) {
        const sched = yield* schedule.get(attempt.id)
        if (Option.isNone(sched)) return 1000
        memo = scheduleMemoOf(attempt.id, sched.value, now)
        if (memo === null) {
          const { nextPollAt, pollLeaseUntil } = sched.value
          if (nextPollAt !== null) return pollLeaseUntil!.getTime() - now + 100
          const first = firstPoll(policy)
          yield* schedule.schedule(attempt.id, first)
          return first
        }
        h.scheduleMemo = memo
      }
      if (memo.nextPollAt > now) return memo.nextPollAt - now
      const pollFailures = memo.failures
      // the runner took this poll's slot before it woke the entity (ParkedTasks.ts): kept if the breaker refuses
      const granted = h.granted
      if (!granted) {
        // looked at before the quota slot is taken (not claiming a half-open probe): an open breaker costs no slot.
        // A poll woken with its slot has none to save: the guard below looks, one Redis step fewer per poll
        const looked = yield* breaker.admit(route, "query", false)
        if (looked._tag === "Refused") return yield* putOff(h, attempt.id, looked.waitMs, pollFailures)
        if (!(yield* quota.acquireWithin({ provider: attempt.provider, tenantId: s.task.tenantId }, quotaWaitMs))) {
          return QUOTA_DEFERRED
        }
      }
      h.granted = false
      // claimed and remembered as one step: an interruption while the claim's query is out would otherwise leave the
      // lease taken but unknown here, not given back (measured: one task 30 s late after a drain, POLL_LEASE)
      const lease = yield* schedule.claim(attempt.id, leaseMs).pipe(
        Effect.tap((l) => Effect.sync(() => (held = Option.getOrNull(l)))),
        Effect.uninterruptible
      )
      if (Option.isNone(lease)) {
        h.scheduleMemo = null
        return 1000 * policy.scale
      }
      const client = yield* clients.get(attempt.provider)
      const sent = yield* breaker.guard(
        route,
        "query",
        client.query(attempt.providerTaskId!, attempt.model),
        isProviderFault
      )
      if (sent._tag === "Refused") {
        // the breaker is open (it opened while this poll waited for its quota slot, or the slot came with the
        // wake): the lease goes back unused, and a slot the wake brought is kept for the next try
        yield* schedule.release(attempt.id, lease.value)
        held = null
        h.granted = granted
        return yield* putOff(h, attempt.id, sent.waitMs, pollFailures)
      }
      const answer = sent.result
      yield* Metric.increment(polls(attempt.provider, Either.isRight(answer) ? "ok" : answer.left.kind))
      now = yield* Clock.currentTimeMillis
      if (Either.isRight(answer)) {
        const res = yield* h.observe(pollObservation(attempt, answer.right, new Date(now), h.traceId))
        const overdue = now - s.task.createdAt.getTime() > Duration.toMillis(policy.expectedMax)
        if (overdue) yield* Effect.logWarning("task is past its expected maximum duration: polled rarely")
        const delay = nextPollAfterSuccess(res.task.status, overdue, policy)
        yield* schedule.finish(attempt.id, lease.value, { delayMs: delay, failed: false, error: null })
        held = null
        h.scheduleMemo = { attemptId: attempt.id, nextPollAt: yield* dueAfterFinish(delay), failures: 0 }
        // a change to another step (the output, a terminal state) is acted on at once; one that leaves the task
        // polling (its progress) waits for the next poll like any other answer
        return isTerminal(res.task.status) || (res.outcome === "changed" && !keepsPolling(res.task.status)) ? 0 : delay
      }
      const error = answer.left
      const delay = failureDelayMs(error, pollFailures + 1)
      switch (error.kind) {
        case "rate_limited":
          yield* quota.penalize(attempt.provider, Duration.millis(delay))
          break
        case "auth":
          yield* breaker.tripCredential(attempt.provider, delay)
          break
        case "malformed":
          yield* Effect.logWarning("malformed provider answer quarantined", { detail: error.detail })
          break
        case "not_found": {
          const since = (attempt.submitStartedAt ?? s.task.createdAt).getTime()
          if (now - since > Duration.toMillis(policy.notFoundGrace)) {
            yield* h.apply((st, at) => providerLostJob(st, at, { source: "poll", traceId: h.traceId }))
          }
          break
        }
        default:
          yield* Effect.logDebug("provider query failed", { kind: error.kind, detail: error.detail })
      }
      yield* schedule.finish(attempt.id, lease.value, {
        delayMs: delay,
        failed: true,
        error: `${error.kind}: ${error.detail}`.slice(0, 500)
      })
      held = null
      h.scheduleMemo = { attemptId: attempt.id, nextPollAt: yield* dueAfterFinish(delay), failures: pollFailures + 1 }
      return delay
    }).pipe(
      Effect.onInterrupt(() =>
        held === null ? Effect.void : schedule.release(s.attempt!.id, held).pipe(
          Effect.zipRight(Effect.logDebug("poll interrupted: lease given back")),
          Effect.ignore
        )
      )
    )
  }

  /** cancel_requested: ask the provider once (remembered in PostgreSQL), then poll for its confirmation. */
  const cancelThenPoll = (h: TaskHandle, s: TaskState) =>
    Effect.gen(function*() {
      const attempt = s.attempt!
      const sched = yield* schedule.get(attempt.id)
      if (Option.isSome(sched) && sched.value.cancelSentAt === null) {
        const route = { provider: attempt.provider, model: attempt.model }
        const client = yield* clients.get(attempt.provider)
        const looked = yield* breaker.admit(route, "cancel", false)
        if (looked._tag === "Refused") return looked.waitMs
        yield* quota.acquire({ provider: attempt.provider, tenantId: s.task.tenantId })
        const guarded = yield* breaker.guard(
          route,
          "cancel",
          client.cancel(attempt.providerTaskId!, attempt.model),
          isProviderFault
        )
        if (guarded._tag === "Refused") return guarded.waitMs
        const sent = guarded.result
        if (Either.isLeft(sent) && sent.left.kind !== "not_found") {
          yield* Effect.logWarning("provider cancel failed; retrying", sent.left)
          return failureDelayMs(sent.left, h.failed())
        }
        yield* schedule.markCancelSent(attempt.id)
        // the confirmation is usually immediate: look soon
        yield* schedule.schedule(attempt.id, 500 * policy.scale)
        h.scheduleMemo = null
        return 0
      }
      return yield* poll(h, s)
    })

  return { poll, cancelThenPoll, failureDelayMs, firstPollMs: () => firstPoll(policy) } as const
}
