import { Clock, Duration, Effect, Schedule } from "effect"
import * as S from "../config/Settings.js"
import { backoffMillis } from "../domain/backoff.js"
import * as Steps from "../domain/lifecycleSteps.js"
import type { PollPolicy } from "../domain/pollPolicy.js"
import type { TaskState } from "../domain/taskState.js"
import { ObjectStore } from "../output/ObjectStore.js"
import { OutputDownloader } from "../output/OutputDownloader.js"
import { OutputSettings } from "../output/outputSettings.js"
import { OutputWork } from "../output/OutputWork.js"
import { AttemptSchedule } from "../persistence/AttemptSchedule.js"
import { TaskOperations } from "../persistence/TaskOperations.js"
import { WriteFence } from "../persistence/WriteFence.js"
import { ProviderClients } from "../providers/ProviderClients.js"
import { ProviderBreaker } from "../quota/ProviderBreaker.js"
import { ProviderQuota } from "../quota/ProviderQuota.js"
import { retryAfterFailure } from "../runtime/retry.js"
import type { AttemptId } from "../schema/ids.js"
import { isTerminal } from "../schema/task.js"
import { traced } from "../tracing/TraceId.js"
import { makeBreakerWaits } from "./breakerWaits.js"
import { makeOutputSteps } from "./outputSteps.js"
import { makeParkedTasks, type Wake } from "./ParkedTasks.js"
import { keepsPolling, makePoller, QUOTA_DEFERRED } from "./poller.js"
import { makeShardsLeft } from "./shardsLeft.js"
import { makeSubmitter } from "./submitter.js"
import { commitStep as commit, lifecycleMeta as meta, type TaskHandle } from "./taskHandle.js"

const pollPolicy: S.Setting<PollPolicy> = S.all({
  scale: S.positiveNumber(
    "POLL_INTERVAL_SCALE",
    "multiplies every poll interval (2 s to 2 min by status and age); below 1 polls faster (tests)",
    1
  ),
  expectedMax: S.duration(
    "TASK_EXPECTED_MAX_DURATION",
    "past this age a job is overdue: polled rarely, reported once, and reconciled",
    "30 minutes"
  ),
  notFoundGrace: S.duration(
    "POLL_NOT_FOUND_GRACE",
    "how long a provider that does not know a job it accepted is believed to lag before the task is reconciled",
    "2 minutes"
  ),
  errorCap: S.duration("POLL_ERROR_BACKOFF_CAP", "longest wait between polls after failed queries", "5 minutes")
})

export const LifecycleSettings = S.area("Lifecycle", "how a task is submitted, polled and finished", {
  policy: pollPolicy,
  submitConcurrency: S.integer(
    "SUBMIT_CONCURRENCY",
    "submissions in flight per provider, model and tenant",
    200,
    { min: 1 }
  ),
  maxSubmitAttempts: S.integer("MAX_SUBMIT_ATTEMPTS", "attempts per task before it fails", 3, { min: 1 }),
  // how long after an unknown submit a provider's "nothing under this key" is believed (the request may still
  // be in flight inside the provider), and how long an unknown submit without a lookup waits for a callback
  submitUnknownGrace: S.duration(
    "SUBMIT_UNKNOWN_GRACE",
    "after a submit of unknown outcome, how long before the provider's \"nothing under this key\" is believed",
    "30 seconds"
  ),
  submitUnknownDeadline: S.duration(
    "SUBMIT_UNKNOWN_DEADLINE",
    "how long a submit of unknown outcome, at a provider without lookups, waits for a callback",
    "1 hour"
  ),
  pollLease: S.duration("POLL_LEASE", "a poll's lease; the sweeper wakes a task whose lease lapsed", "30 seconds"),
  idleAfter: S.duration(
    "TASK_IDLE_AFTER",
    "a polling task whose next poll is further away than this lets its entity go idle (out of memory); the runner " +
      "wakes it from next_poll_at",
    "30 seconds"
  ),
  // off by default (above QUOTA_MAX_WAIT): measured with 5 s, 1,000 tasks at 20/s, the live heap fell 170 → 145 MiB
  // but slots taken by the runner were polled late and bunched (5 s buckets 8–35/s) and 115 tasks went unpolled
  idleQuotaWait: S.duration(
    "TASK_IDLE_QUOTA_WAIT",
    "a due poll whose provider quota slot is further away than this lets its entity go idle; the runner takes the " +
      "slot for it and wakes it then (at QUOTA_MAX_WAIT or more, off: measured, 5 s saved heap but bunched polls)",
    "10 minutes"
  ),
  wakeLead: S.duration("TASK_WAKE_LEAD", "how long before its next poll an idle task is woken", "1 second"),
  entityIdleTime: S.duration(
    "TASK_ENTITY_IDLE_TIME",
    "how long a task entity with nothing to do (idle, finished) stays in memory after its last message",
    "5 seconds"
  ),
  outputUrlTtl: S.duration("OUTPUT_URL_TTL", "lifetime of the signed URL of a finished task's output", "1 hour")
})

/** States whose next step is a poll at next_poll_at: the entity may go idle while it waits (seed 12.8). */
const isPolling = (s: TaskState) =>
  s.attempt !== null && s.attempt.providerTaskId !== null &&
  (keepsPolling(s.task.status) || s.task.status === "cancel_requested")

/**
 * After a step of a task with an attempt (`delay`: what the step answered), whether the task parks, its entity going
 * idle, rather than wait awake: its quota slot is far (QUOTA_DEFERRED), or it polls and its next poll is far
 * (TASK_IDLE_AFTER), or its quota slot is (`backlogged`: due tasks of its scope already wait for theirs in the
 * runner's line). Not a task woken with its slot (`granted`, TASK_WAKE_LEAD before its poll): parked again, it would be
 * woken with a second slot, the first one spent on nothing. (A slot kept past a breaker's refusal, which comes
 * before the slot is spent, keeps such a task awake too, for less than TASK_IDLE_AFTER.)
 */
export const parksAfterStep = (step: {
  readonly delay: number
  readonly polling: boolean
  readonly granted: boolean
  /** looked at last, only when it decides (a lookup by scope key, on every step otherwise) */
  readonly backlogged: () => boolean
  readonly idleAfterMs: number
}) =>
  step.delay === QUOTA_DEFERRED ||
  (step.polling && (step.delay >= step.idleAfterMs || (step.delay > 0 && !step.granted && step.backlogged())))

/**
 * Drives one task from queued to a terminal state, as a fiber in its entity's scope: submits it (exactly once
 * per attempt, resolving unknown outcomes by lookup), polls the provider on the task's schedule, asks the
 * provider to cancel, fetches and checks the output. Every decision is a pure step (lifecycle.ts, transition.ts)
 * committed through the entity; everything it waits for is in PostgreSQL, so a new owner after a shard move
 * resumes where the last one stopped.
 */
export class TaskLifecycle extends Effect.Service<TaskLifecycle>()("TaskLifecycle", {
  scoped: Effect.gen(function*() {
    const config = yield* LifecycleSettings.config
    const clients = yield* ProviderClients
    const schedule = yield* AttemptSchedule
    const operations = yield* TaskOperations
    const downloader = yield* OutputDownloader
    const objects = yield* ObjectStore
    const work = yield* OutputWork
    const fence = yield* WriteFence
    const quota = yield* ProviderQuota
    const breaker = yield* ProviderBreaker
    const poller = makePoller({ clients, schedule, quota, breaker, config })
    const parked = makeParkedTasks()
    const idleAfterMs = Duration.toMillis(config.idleAfter)
    const scaled = (seconds: number) => seconds * 1000 * config.policy.scale * (0.8 + Math.random() * 0.4)
    /** The one backoff from 1 s (scaled like every interval), for retry `n`, capped at `capSeconds`. */
    const retryDelay = (n: number, capSeconds: number) =>
      backoffMillis(n, { baseMs: 1000 * config.policy.scale, capMs: capSeconds * 1000 * config.policy.scale })

    const output = makeOutputSteps({
      clients,
      operations,
      downloader,
      objects,
      work,
      lease: (yield* OutputSettings.config).fetchLease,
      scaled,
      retryDelay
    })

    const waits = yield* makeBreakerWaits({
      look: (route) => Effect.map(breaker.admit(route, "submit", false), (a) => a._tag === "Admitted"),
      intervalMs: () => scaled(5)
    })
    const { resolveUnknown, submit } = makeSubmitter({
      clients,
      schedule,
      quota,
      breaker,
      waits,
      fence,
      poller,
      config,
      scaled,
      retryDelay
    })

    /** One unit of work for the task's current state; the result is how many ms until the next look. */
    const step = (h: TaskHandle, s: TaskState): Effect.Effect<number, unknown> => {
      const attempt = s.attempt
      if (attempt === null) return Effect.succeed(Number.POSITIVE_INFINITY)
      switch (s.task.status) {
        case "queued":
          return submit(h, s)
        case "submitting":
        case "submit_unknown":
          return resolveUnknown(h, s)
        case "cancel_requested":
          return attempt.providerTaskId === null ? resolveUnknown(h, s) : poller.cancelThenPoll(h, s)
        case "submitted":
        case "running":
        case "provider_status_unknown":
          return poller.poll(h, s)
        case "provider_succeeded":
          return commit(h, (st, now) =>
            Steps.beginOutput(
              st,
              new Date((attempt.lastProviderAt ?? now).getTime() + Duration.toMillis(config.outputUrlTtl)),
              now,
              meta(h)
            ))
        case "output_at_risk":
          return output.retryOutput(h, s)
        case "fetching_output":
          return output.fetchOutput(h, s)
        case "processing_media":
          return output.checkMedia(h, s)
        default:
          return Effect.succeed(Number.POSITIVE_INFINITY)
      }
    }

    /**
     * The task's lifecycle loop: runs until the task is terminal or waits for a human. Failures of one step
     * (the database, a provider) are logged and retried with backoff; they never end the loop.
     */
    const drive = (h: TaskHandle): Effect.Effect<void> =>
      Effect.gen(function*() {
        while (true) {
          const s = yield* retryAfterFailure(h.current, {
            while: (e) => e._tag === "StorageUnavailable",
            schedule: Schedule.spaced("2 seconds")
          })
          if (isTerminal(s.task.status) || s.task.status === "manual_review") return
          // READ_ONLY, MAINTENANCE: no provider query whose answer could not be written; looked at every second
          if (!(yield* fence.allows("polling"))) {
            yield* h.waitForChange(1000)
            continue
          }
          // each step (a submit, a poll round, an output fetch) is the work of a trace of its own
          const delay = yield* traced("TaskLifecycle.step", undefined, (traceId) => {
            h.traceId = traceId
            return step(h, s).pipe(
              Effect.catchAllCause((cause) =>
                Effect.as(
                  Effect.logWarning("lifecycle step failed; retrying", cause),
                  retryDelay(h.failed(), 60)
                )
              )
            )
          })
          // only a polling task's step answers QUOTA_DEFERRED: it has an attempt and its provider's quota scope
          const quotaScope = s.attempt === null ? null : { provider: s.attempt.provider, tenantId: s.task.tenantId }
          if (
            quotaScope !== null && parksAfterStep({
              delay,
              polling: isPolling(s),
              granted: h.granted,
              backlogged: () => parked.backlogged(quotaScope),
              idleAfterMs
            })
          ) {
            const dueAt = (yield* Clock.currentTimeMillis) + Math.max(0, delay)
            parked.park(h.taskId, {
              dueAt,
              scope: quotaScope
            })
            if (yield* h.settle) return yield* Effect.logDebug("task idle until its next poll")
            // a webhook or a cancel changed the task meanwhile: it stays awake
            parked.unpark(h.taskId)
            continue
          }
          if (delay > 0) yield* h.waitForChange(delay)
        }
      }).pipe(
        Effect.catchAllCause((cause) => Effect.logError("task lifecycle stopped", cause)),
        Effect.ensuring(waits.leave(h.taskId)),
        Effect.annotateLogs({ task_id: h.taskId })
      )

    /**
     * An unsigned callback claimed an outcome for `attemptId`: poll it now rather than at its next turn. The entity
     * wakes the loop (dropping its schedule memo); the poll's answer is what gets applied.
     */
    const recheck = (attemptId: AttemptId) => schedule.pollSoon(attemptId)

    /** Wakes this runner's idle tasks when their next poll is due, with a quota slot taken for it (ParkedTasks.ts). */
    const wakeParked = (wake: Wake, stillHere: (taskId: string) => boolean) =>
      parked.run({ tick: Duration.millis(200), lead: config.wakeLead, acquire: quota.acquire, wake, stillHere })

    return { drive, recheck, parked, wakeParked, shardsLeft: makeShardsLeft() } as const
  })
}) {}
