import type { EventSource } from "../schema/events.js"
import type { AttemptId } from "../schema/ids.js"
import { AttemptSnapshot, type PublicErrorCode, type TaskSnapshot, trusted } from "../schema/task.js"
import type { TaskState } from "./taskState.js"
import { current, makeChange, Outcome, type Target } from "./transition.js"

/**
 * The entity's own steps (submission, output), as pure decisions like `transition`: each checks that the task
 * is still where the step expects it (a webhook may have moved it meanwhile) and otherwise changes nothing.
 */
export interface StepMeta {
  readonly source: EventSource
  readonly traceId: string
}

const changed = (
  s: TaskState,
  attempt: AttemptSnapshot | null,
  target: Target,
  now: Date,
  meta: StepMeta,
  extra: { readonly assetId?: string; readonly newAttempt?: boolean; readonly currentAttemptId?: AttemptId } = {}
) => {
  const task = extra.currentAttemptId === undefined
    ? s.task
    : ({ ...s.task, currentAttemptId: extra.currentAttemptId } as TaskSnapshot)
  const change = makeChange(task, attempt, target, now, {
    ...meta,
    ...(extra.assetId === undefined ? {} : { assetId: extra.assetId })
  })
  return Outcome.Changed({ change: extra.newAttempt ? { ...change, newAttempt: true } : change })
}

const isCurrent = (s: TaskState, attemptId: AttemptId): s is TaskState & { attempt: AttemptSnapshot } =>
  s.attempt !== null && s.attempt.id === attemptId && s.task.currentAttemptId === attemptId

const withAttempt = (a: AttemptSnapshot, patch: Partial<AttemptSnapshot>) =>
  new AttemptSnapshot({ ...a, ...patch }, trusted)

/** queued → submitting, committed BEFORE the provider call: a crash mid-call leaves SUBMITTING, resolved as unknown. */
export const beginSubmit = (s: TaskState, now: Date, meta: StepMeta): Outcome => {
  if (s.task.status !== "queued" || s.attempt === null || s.attempt.submitState !== "PREPARED") {
    return Outcome.Ignored({ reason: "backward" })
  }
  return changed(
    s,
    withAttempt(s.attempt, { submitState: "SUBMITTING", submitStartedAt: now }),
    { ...current(s.task), status: "submitting", stage: "submitting" },
    now,
    meta
  )
}

/** The provider holds the job (a submit response, or a lookup by our idempotency key found it). */
export const submitAccepted = (
  s: TaskState,
  attemptId: AttemptId,
  providerTaskId: string,
  now: Date,
  meta: StepMeta
): Outcome => {
  if (!isCurrent(s, attemptId) || s.attempt.providerTaskId !== null) return Outcome.Unchanged({ reason: "duplicate" })
  if (s.attempt.submitState !== "SUBMITTING" && s.attempt.submitState !== "SUBMIT_UNKNOWN") {
    return Outcome.Ignored({ reason: "backward" })
  }
  const attempt = withAttempt(s.attempt, { submitState: "SUBMITTED", providerTaskId, unknownSince: null })
  // a cancel asked meanwhile stays asked: the poller now knows which job to cancel
  const target: Target = s.task.status === "cancel_requested"
    ? current(s.task)
    : { ...current(s.task), status: "submitted", stage: "provider_queued" }
  return changed(s, attempt, target, now, meta)
}

/** The submit may have reached the provider (timeout, reset, 5xx, a crash mid-call): never re-submit blindly. */
export const submitUnknown = (s: TaskState, attemptId: AttemptId, now: Date, meta: StepMeta): Outcome => {
  if (!isCurrent(s, attemptId) || s.attempt.submitState !== "SUBMITTING") return Outcome.Ignored({ reason: "backward" })
  const attempt = withAttempt(s.attempt, {
    submitState: "SUBMIT_UNKNOWN",
    unknownSince: s.attempt.submitStartedAt ?? now
  })
  const target: Target = s.task.status === "cancel_requested" ? current(s.task) : {
    ...current(s.task),
    status: "submit_unknown"
  }
  return changed(s, attempt, target, now, meta)
}

/**
 * The provider definitely has no job for this attempt (rejected, or a lookup confirmed nothing): a new attempt
 * (new idempotency key) within the budget, else the task fails. A task whose user asked to cancel is canceled.
 */
export const retrySubmission = (
  s: TaskState,
  attemptId: AttemptId,
  budget: number,
  failWith: PublicErrorCode,
  now: Date,
  meta: StepMeta
): Outcome => {
  if (!isCurrent(s, attemptId) || s.attempt.providerTaskId !== null) return Outcome.Ignored({ reason: "backward" })
  const rejected = withAttempt(s.attempt, { submitState: "REJECTED" })
  if (s.task.status === "cancel_requested") {
    return changed(s, rejected, { ...current(s.task), status: "canceled", errorCode: null }, now, meta)
  }
  if (s.attempt.attemptNo >= budget) {
    return changed(s, rejected, { ...current(s.task), status: "failed", errorCode: failWith }, now, meta)
  }
  const next = new AttemptSnapshot({
    id: crypto.randomUUID() as AttemptId,
    taskId: s.task.id,
    attemptNo: s.attempt.attemptNo + 1,
    provider: s.attempt.provider,
    model: s.attempt.model,
    clientRequestId: crypto.randomUUID(),
    providerTaskId: null,
    submitState: "PREPARED",
    lastProviderSeq: null,
    lastProviderAt: null,
    unknownSince: null,
    submitStartedAt: null,
    outputDeadlineAt: null,
    outputRefs: []
  }, trusted)
  // the stage stays where it was: a task never moves back to an earlier stage
  return changed(s, next, { ...current(s.task), status: "queued" }, now, meta, {
    newAttempt: true,
    currentAttemptId: next.id
  })
}

/** The attempt's outcome cannot be established (no lookup, past the deadline): a human decides. */
export const escalate = (s: TaskState, now: Date, meta: StepMeta): Outcome =>
  s.task.status === "manual_review"
    ? Outcome.Unchanged({ reason: "duplicate" })
    : changed(s, s.attempt, { ...current(s.task), status: "manual_review" }, now, meta)

/** provider_succeeded (or a retry after output_at_risk) → fetching_output, with the output's deadline fixed. */
export const beginOutput = (s: TaskState, deadline: Date, now: Date, meta: StepMeta): Outcome => {
  if (s.task.status !== "provider_succeeded" && s.task.status !== "output_at_risk") {
    return Outcome.Ignored({ reason: "backward" })
  }
  const attempt = s.attempt === null || s.attempt.outputDeadlineAt !== null
    ? s.attempt
    : withAttempt(s.attempt, { outputDeadlineAt: deadline })
  return changed(
    s,
    attempt,
    { ...current(s.task), status: "fetching_output", stage: "fetching_output", progress: null },
    now,
    meta
  )
}

/** The output is in our store: now it is checked. */
export const outputStored = (s: TaskState, now: Date, meta: StepMeta): Outcome =>
  s.task.status !== "fetching_output"
    ? Outcome.Ignored({ reason: "backward" })
    : changed(s, s.attempt, { ...current(s.task), status: "processing_media", stage: "processing_media" }, now, meta)

/** The stored file passed its checks: the task is ready with its asset. */
export const outputReady = (s: TaskState, assetId: string, now: Date, meta: StepMeta): Outcome =>
  s.task.status !== "processing_media"
    ? Outcome.Ignored({ reason: "backward" })
    : changed(s, s.attempt, { status: "ready", stage: "done", progress: 100, errorCode: null }, now, meta, {
      assetId
    })

/** Fetching or storing failed in a way worth retrying: the output is at risk until a retry succeeds. */
export const outputAtRisk = (s: TaskState, now: Date, meta: StepMeta): Outcome =>
  s.task.status !== "fetching_output" && s.task.status !== "processing_media"
    ? Outcome.Ignored({ reason: "backward" })
    : changed(s, s.attempt, { ...current(s.task), status: "output_at_risk" }, now, meta)

/** The output cannot be had (gone, invalid, past its deadline): the task fails and its reserve is refunded. */
export const outputLost = (s: TaskState, now: Date, meta: StepMeta): Outcome =>
  s.task.status !== "fetching_output" && s.task.status !== "processing_media" && s.task.status !== "output_at_risk"
    ? Outcome.Ignored({ reason: "backward" })
    : changed(s, s.attempt, { ...current(s.task), status: "failed", errorCode: "output_unavailable" }, now, meta)

/** The provider no longer knows a job it accepted (404 past the grace period): reconcile, keep looking rarely. */
export const providerLostJob = (s: TaskState, now: Date, meta: StepMeta): Outcome =>
  s.task.status !== "submitted" && s.task.status !== "running"
    ? Outcome.Unchanged({ reason: "duplicate" })
    : changed(s, s.attempt, { ...current(s.task), status: "provider_status_unknown" }, now, meta)

export type Resolution = "ready" | "failed" | "canceled"

/**
 * An operator decides a task waiting in manual_review. `failed` and `canceled` end it (the terminal commit refunds
 * the reserve and frees its slots). `ready` needs an output: the provider's, fetched and checked like any other —
 * the task goes back to fetching_output, and becomes ready (and settled) only once the file is stored and is a
 * video; a task whose provider never reported an output cannot be made ready by decree ("no_output").
 */
export const operatorResolve = (
  s: TaskState,
  as: Resolution,
  outputDeadline: Date,
  now: Date,
  meta: StepMeta
): Outcome => {
  if (s.task.status !== "manual_review") return Outcome.Ignored({ reason: "not_in_review" })
  if (as === "ready") {
    if (s.attempt === null || s.attempt.outputRefs.length === 0) return Outcome.Ignored({ reason: "no_output" })
    const attempt = s.attempt.outputDeadlineAt !== null
      ? s.attempt
      : withAttempt(s.attempt, { outputDeadlineAt: outputDeadline })
    return changed(
      s,
      attempt,
      { ...current(s.task), status: "fetching_output", stage: "fetching_output", progress: null },
      now,
      meta
    )
  }
  if (as === "canceled") {
    return changed(s, s.attempt, { ...current(s.task), status: "canceled", errorCode: null }, now, meta)
  }
  // an unknown submit nobody could resolve: the user is told it timed out, not that the provider failed
  const unknown = s.attempt !== null &&
    (s.attempt.submitState === "SUBMIT_UNKNOWN" || s.attempt.submitState === "SUBMITTING")
  return changed(
    s,
    s.attempt,
    { ...current(s.task), status: "failed", errorCode: unknown ? "timed_out" : "provider_failed" },
    now,
    meta
  )
}
