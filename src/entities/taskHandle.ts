import { Effect } from "effect"
import type { StepMeta } from "../domain/lifecycleSteps.js"
import type { TaskState } from "../domain/taskState.js"
import type { Outcome } from "../domain/transition.js"
import type { StorageUnavailable, TaskNotFound, VersionConflict, WriteFenced } from "../schema/errors.js"
import type { TaskId } from "../schema/ids.js"
import type { ProviderObservation } from "../schema/observation.js"
import type { CommandResult } from "./GenerationTask.js"

type WriteError = TaskNotFound | WriteFenced | VersionConflict | StorageUnavailable

/** What the lifecycle needs of its entity: the cached state, commits through the entity, and a wake-up. */
export interface TaskHandle {
  readonly taskId: TaskId
  readonly current: Effect.Effect<TaskState, TaskNotFound | StorageUnavailable>
  readonly apply: (decide: (s: TaskState, now: Date) => Outcome) => Effect.Effect<CommandResult, WriteError>
  /**
   * The same path as a webhook's observation: one transition function for both. Made by the lifecycle itself (its
   * poll), so its change does not end the lifecycle's next `waitForChange` nor keep it from settling.
   */
  readonly observe: (o: ProviderObservation) => Effect.Effect<CommandResult, WriteError>
  /** Sleeps up to `ms`, or less when another path (a webhook, a cancel) changed the task's step (applyWaking). */
  readonly waitForChange: (ms: number) => Effect.Effect<void>
  /** Ends the wait under way (or the next one) as a change would: another part of the runner wants a step now. */
  readonly wake: () => void
  /**
   * The attempt's poll schedule as this entity last wrote it (null: read it from PostgreSQL), so a poll costs
   * no extra read; dropped whenever PostgreSQL may know better (a lost lease claim, a new attempt).
   */
  scheduleMemo: { attemptId: string; nextPollAt: number; failures: number } | null
  /** Consecutive failed steps: counts one more and returns the count. */
  readonly failed: () => number
  readonly failures: () => number
  readonly succeeded: () => void
  /** A quota slot was taken for this task's next poll by the runner that woke it: the poll uses it. */
  granted: boolean
  /**
   * The lifecycle is about to stop while the task waits (it went idle): true if it may, and the entity then no longer
   * counts it as running; false if a webhook or a cancel changed the task meanwhile (keep driving).
   */
  readonly settle: Effect.Effect<boolean>
  /** The trace id of the lifecycle step running now (each step, a poll round say, is a trace of its own). */
  traceId: string
}

/** Commits a step; the number is how soon to look again (0: at once, the state moved). */
export const commitStep = (h: TaskHandle, decide: (s: TaskState, now: Date) => Outcome, thenMs = 0) =>
  Effect.as(h.apply(decide), thenMs)

/** Changes the lifecycle makes on its own account, under the trace id of the step that makes them. */
export const lifecycleMeta = (h: TaskHandle): StepMeta => ({ source: "system", traceId: h.traceId })
