import type { TaskStatus } from "../schema/task.js"

/**
 * DESIGN §6: every status a task may move to from each status. The transition function never produces a
 * move outside this table (a property test checks it); staying in the same status (progress) is always allowed.
 */
export const allowedTransitions: { readonly [From in TaskStatus]: ReadonlyArray<TaskStatus> } = {
  queued: ["submitting", "submitted", "running", "provider_succeeded", "cancel_requested", "canceled", "failed"],
  submitting: [
    "submitted",
    "running",
    "provider_succeeded",
    "submit_unknown",
    "queued",
    "cancel_requested",
    "failed",
    "canceled"
  ],
  submit_unknown: [
    "submitted",
    "running",
    "provider_succeeded",
    "queued",
    "cancel_requested",
    "failed",
    "canceled",
    "manual_review"
  ],
  submitted: ["running", "provider_succeeded", "provider_status_unknown", "cancel_requested", "failed", "canceled"],
  running: ["provider_succeeded", "provider_status_unknown", "cancel_requested", "failed", "canceled"],
  provider_status_unknown: [
    "submitted",
    "running",
    "provider_succeeded",
    "cancel_requested",
    "failed",
    "canceled",
    "manual_review"
  ],
  cancel_requested: ["canceled", "provider_succeeded", "failed", "manual_review"],
  provider_succeeded: ["fetching_output", "manual_review"],
  fetching_output: ["processing_media", "output_at_risk", "failed", "manual_review"],
  output_at_risk: ["fetching_output", "failed", "manual_review"],
  processing_media: ["ready", "output_at_risk", "failed", "manual_review"],
  manual_review: ["fetching_output", "ready", "failed", "canceled"],
  ready: [],
  failed: [],
  canceled: []
}

export const isAllowed = (from: TaskStatus, to: TaskStatus): boolean =>
  from === to || allowedTransitions[from].includes(to)
