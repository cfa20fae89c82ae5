import { Data, Duration } from "effect"
import type { DomainEvent, EventSource, PublicTaskPayload, TaskEventType } from "../schema/events.js"
import type { ErrorClass, NormalizedStatus, ProviderObservation } from "../schema/observation.js"
import {
  AttemptSnapshot,
  isTerminal,
  type PublicErrorCode,
  type Stage,
  stageRank,
  type SubmitState,
  TaskSnapshot,
  type TaskStatus,
  trusted
} from "../schema/task.js"
import { isAllowed } from "./allowedTransitions.js"
import { domainEventOf, publicPayloadOf } from "./taskEvents.js"

export type IgnoreReason =
  | "stale_attempt"
  | "stale_sequence"
  | "terminal"
  | "backward"
  | "progress_backward"
  | "cancel_requested"
  | "manual_review"
  | "not_cancelable"
  | "not_in_review"
  | "no_output"

/** A committed change: the next task and attempt, what browsers see, and what goes to the outbox. */
export interface Change {
  readonly task: TaskSnapshot
  readonly attempt: AttemptSnapshot | null
  /** The attempt is new (a retried submission): inserted, and the task's other live attempts retired. */
  readonly newAttempt?: boolean
  readonly eventType: TaskEventType
  readonly source: EventSource
  readonly publicPayload: PublicTaskPayload
  /** The domain event without event_id and cursor: the store assigns both inside the commit. */
  readonly domainEvent: Omit<DomainEvent, "event_id" | "cursor">
}

export type Outcome = Data.TaggedEnum<{
  Ignored: { readonly reason: IgnoreReason }
  Unchanged: { readonly reason: "duplicate" | "coalesced" }
  Changed: { readonly change: Change }
  /** Contradictory terminal facts: never last-writer-wins. `escalation` moves a live task to manual_review. */
  Conflict: { readonly reason: string; readonly escalation: Change | null }
}>
export const Outcome = Data.taggedEnum<Outcome>()

export interface TransitionOptions {
  /** Write a progress-only change when it moved at least this many points ... */
  readonly progressStep: number
  /** ... or when at least this long passed since the task was last written. */
  readonly progressInterval: Duration.Duration
}

export const defaultTransitionOptions: TransitionOptions = {
  progressStep: 5,
  progressInterval: Duration.seconds(2)
}

export interface Target {
  readonly status: TaskStatus
  readonly stage: Stage
  readonly progress: number | null
  readonly errorCode: PublicErrorCode | null
}

const afterProviderSuccess: ReadonlySet<TaskStatus> = new Set([
  "provider_succeeded",
  "fetching_output",
  "output_at_risk",
  "processing_media"
])

/** Whether a provider's terminal observation agrees with a platform terminal status. */
const agrees = (status: TaskStatus, observed: NormalizedStatus): boolean =>
  (status === "ready" && observed === "succeeded") ||
  (status === "failed" && observed === "failed") ||
  (status === "canceled" && observed === "canceled")

const isProviderTerminal = (s: NormalizedStatus): boolean => s === "succeeded" || s === "failed" || s === "canceled"

const publicCodeOf = (errorClass: ErrorClass | null): PublicErrorCode =>
  errorClass === null ? "provider_failed" : errorClass

const targetOf = (task: TaskSnapshot, o: ProviderObservation): Target => {
  switch (o.status) {
    case "queued":
      return { status: "submitted", stage: o.stage ?? "provider_queued", progress: o.progress, errorCode: null }
    case "running":
      return { status: "running", stage: o.stage ?? "generating", progress: o.progress, errorCode: null }
    case "succeeded":
      return { status: "provider_succeeded", stage: "generated", progress: 100, errorCode: null }
    case "failed":
      return { status: "failed", stage: task.stage, progress: task.progress, errorCode: publicCodeOf(o.errorClass) }
    case "canceled":
      return {
        status: "canceled",
        stage: task.stage,
        progress: task.progress,
        // a cancel the user asked for is not an error; one the provider did on its own is
        errorCode: task.status === "cancel_requested" ? null : "canceled_by_provider"
      }
  }
}

const submitStateOf = (status: NormalizedStatus): SubmitState => {
  switch (status) {
    case "queued":
      return "SUBMITTED"
    case "running":
      return "RUNNING"
    case "succeeded":
      return "SUCCEEDED"
    case "failed":
      return "FAILED"
    case "canceled":
      return "CANCELLED"
  }
}

const nextAttempt = (attempt: AttemptSnapshot, o: ProviderObservation): AttemptSnapshot =>
  new AttemptSnapshot({
    ...attempt,
    providerTaskId: attempt.providerTaskId ?? o.providerTaskId,
    submitState: submitStateOf(o.status),
    lastProviderSeq: o.providerSequence === null
      ? attempt.lastProviderSeq
      : Math.max(o.providerSequence, attempt.lastProviderSeq ?? o.providerSequence),
    lastProviderAt: o.providerOccurredAt ?? o.receivedAt,
    unknownSince: null,
    outputRefs: o.status === "succeeded" && o.outputRefs.length > 0 ? o.outputRefs : attempt.outputRefs
  }, trusted)

/** Builds the change record for moving `task` to `target`: version + 1, public payload, domain event. */
export const makeChange = (
  task: TaskSnapshot,
  attempt: AttemptSnapshot | null,
  target: Target,
  now: Date,
  meta: { readonly source: EventSource; readonly traceId: string; readonly assetId?: string | null }
): Change => {
  const next = new TaskSnapshot({
    ...task,
    status: target.status,
    stage: target.stage,
    progress: target.progress,
    errorCode: target.errorCode,
    assetId: meta.assetId === undefined ? task.assetId : meta.assetId,
    version: task.version + 1,
    updatedAt: now,
    terminalAt: isTerminal(target.status) ? now : null
  }, trusted)
  return {
    task: next,
    attempt,
    eventType: "task.status.changed",
    source: meta.source,
    publicPayload: publicPayloadOf(next),
    domainEvent: domainEventOf(next, {
      eventType: "task.status.changed",
      source: meta.source,
      traceId: meta.traceId,
      occurredAt: now
    })
  }
}

/**
 * The single transition function for provider observations (webhook, poll and reconcile alike).
 * Pure: the same inputs always give the same outcome, and nothing here does I/O.
 */
export const transition = (
  task: TaskSnapshot,
  attempt: AttemptSnapshot | null,
  o: ProviderObservation,
  now: Date,
  options: TransitionOptions = defaultTransitionOptions
): Outcome => {
  if (attempt === null || task.currentAttemptId !== o.attemptId || attempt.id !== o.attemptId) {
    return Outcome.Ignored({ reason: "stale_attempt" })
  }
  if (
    o.providerSequence !== null && attempt.lastProviderSeq !== null && o.providerSequence <= attempt.lastProviderSeq
  ) {
    return Outcome.Ignored({ reason: "stale_sequence" })
  }
  const change = (target: Target) =>
    Outcome.Changed({
      change: makeChange(task, nextAttempt(attempt, o), target, now, { source: o.source, traceId: o.traceId })
    })
  const escalate = () =>
    makeChange(task, attempt, { ...current(task), status: "manual_review" }, now, {
      source: o.source,
      traceId: o.traceId
    })

  if (isTerminal(task.status)) {
    if (agrees(task.status, o.status)) return Outcome.Unchanged({ reason: "duplicate" })
    if (isProviderTerminal(o.status)) {
      return Outcome.Conflict({ reason: `${o.status} after ${task.status}`, escalation: null })
    }
    return Outcome.Ignored({ reason: "terminal" })
  }
  if (task.status === "manual_review") {
    // still recorded: the conflict that put it here may have lost its record in a crash, and a human wants all
    return isProviderTerminal(o.status)
      ? Outcome.Conflict({ reason: `${o.status} during manual review`, escalation: null })
      : Outcome.Ignored({ reason: "manual_review" })
  }
  if (afterProviderSuccess.has(task.status)) {
    if (o.status === "succeeded") return Outcome.Unchanged({ reason: "duplicate" })
    // A cancel acknowledged after the job finished (the cancel/success race) leaves a usable output: keep it and
    // let cost reconciliation look. A failure reported after success puts the output in doubt: a human decides.
    if (o.status === "canceled") {
      return Outcome.Conflict({ reason: "canceled after provider success", escalation: null })
    }
    if (o.status === "failed") {
      return Outcome.Conflict({ reason: "failed after provider success", escalation: escalate() })
    }
    return Outcome.Ignored({ reason: "backward" })
  }

  const target = targetOf(task, o)
  if (task.status === "cancel_requested") {
    // seed 12.7.6: whichever terminal the provider confirms first wins; progress no longer matters
    if (isProviderTerminal(o.status)) return change(target)
    // ... except that an unknown submit learns its job here (a webhook naming the attempt): bound, the job can be
    // canceled, where before the cancel waited for a lookup that may not exist
    return attempt.providerTaskId === null && o.providerTaskId !== null
      ? change(current(task))
      : Outcome.Ignored({ reason: "cancel_requested" })
  }
  if (isProviderTerminal(o.status)) return change(target)

  const currentRank = stageRank(task.stage)
  const targetRank = stageRank(target.stage)
  if (targetRank < currentRank) return Outcome.Ignored({ reason: "backward" })
  if (targetRank > currentRank) return change(target)
  if (target.status !== task.status) {
    // same stage, new status (e.g. back from provider_status_unknown): progress still never goes back
    const progress = target.progress === null || task.progress === null
      ? (target.progress ?? task.progress)
      : Math.max(target.progress, task.progress)
    return change({ ...target, progress })
  }
  if (target.progress === null || target.progress === task.progress) return Outcome.Unchanged({ reason: "duplicate" })
  if (task.progress !== null && target.progress < task.progress) return Outcome.Ignored({ reason: "progress_backward" })
  const moved = target.progress - (task.progress ?? 0)
  const elapsed = now.getTime() - task.updatedAt.getTime()
  if (moved < options.progressStep && elapsed < Duration.toMillis(options.progressInterval)) {
    return Outcome.Unchanged({ reason: "coalesced" })
  }
  return change(target)
}

export const current = (task: TaskSnapshot): Target => ({
  status: task.status,
  stage: task.stage,
  progress: task.progress,
  errorCode: task.errorCode
})

/**
 * A user's cancel (seed 12.7.6): never `canceled` at once when the provider may have the job; the provider's
 * confirmation (an observation) decides. A task nobody submitted yet is canceled immediately.
 */
export const requestCancel = (
  task: TaskSnapshot,
  attempt: AttemptSnapshot | null,
  now: Date,
  meta: { readonly source: EventSource; readonly traceId: string }
): Outcome => {
  if (task.status === "canceled" || task.status === "cancel_requested") {
    return Outcome.Unchanged({ reason: "duplicate" })
  }
  if (isTerminal(task.status) || afterProviderSuccess.has(task.status) || task.status === "manual_review") {
    return Outcome.Ignored({ reason: "not_cancelable" })
  }
  const neverSent = task.status === "queued" && (attempt === null || attempt.submitState === "PREPARED")
  const status: TaskStatus = neverSent ? "canceled" : "cancel_requested"
  const nextAttempt = neverSent && attempt !== null
    ? new AttemptSnapshot({ ...attempt, submitState: "CANCELLED" }, trusted)
    : attempt
  return Outcome.Changed({
    change: makeChange(task, nextAttempt, { ...current(task), status, errorCode: null }, now, meta)
  })
}

/**
 * Every change stays inside DESIGN §6's table with version + 1: checked by the property tests and by the entity
 * before it commits.
 */
export const changeIsAllowed = (from: TaskSnapshot, change: Change): boolean =>
  isAllowed(from.status, change.task.status) && change.task.version === from.version + 1
