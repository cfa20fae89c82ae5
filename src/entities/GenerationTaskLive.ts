import { Entity } from "@effect/cluster"
import { Clock, Duration, Effect, Option, Queue, Ref } from "effect"
import { operatorResolve } from "../domain/lifecycleSteps.js"
import type { TaskState } from "../domain/taskState.js"
import { changeIsAllowed, type Outcome, requestCancel, transition } from "../domain/transition.js"
import { TaskStore } from "../persistence/TaskStore.js"
import { TaskNotFound, VersionConflict, WriteFenced } from "../schema/errors.js"
import type { TaskId } from "../schema/ids.js"
import type { ProviderObservation } from "../schema/observation.js"
import { isTerminal, type TaskStatus, trusted } from "../schema/task.js"
import { CommandResult, GenerationTask } from "./GenerationTask.js"
import type { TaskHandle } from "./taskHandle.js"
import { TaskLifecycle } from "./TaskLifecycle.js"

/** An operator's "ready" whose output had no deadline yet: the provider's URL is tried for this long. */
const OPERATOR_OUTPUT_WINDOW_MS = 60 * 60 * 1000

/** How many times one message re-evaluates after losing the version CAS before giving up. */
const MAX_CAS_ROUNDS = 5

export const GenerationTaskLive = GenerationTask.toLayer(
  Effect.gen(function*() {
    const address = yield* Entity.CurrentAddress
    const taskId = address.entityId as string as TaskId
    const store = yield* TaskStore
    const lifecycle = yield* TaskLifecycle
    // the lifecycle fiber and the Rpc handlers both commit: one decision at a time, so neither loses a CAS to
    // the other, and the lifecycle wakes when a handler moved the task
    const decisions = yield* Effect.makeSemaphore(1)
    const changed = yield* Queue.sliding<void>(1)
    // Memory is a cache of PostgreSQL: filled at start, replaced by what each commit wrote, dropped on CAS loss.
    const cache = yield* Ref.make(yield* store.load(taskId).pipe(Effect.orElseSucceed(() => Option.none())))

    const current = Effect.gen(function*() {
      const cached = yield* Ref.get(cache)
      if (Option.isSome(cached)) return cached.value
      const loaded = yield* store.load(taskId)
      yield* Ref.set(cache, loaded)
      return yield* Option.match(loaded, {
        onNone: () => Effect.fail(new TaskNotFound({ taskId })),
        onSome: Effect.succeed
      })
    })

    /** Evaluates `decide` against the current state and commits its change, reloading on a lost CAS. */
    const applyOnce = Effect.fn("GenerationTask.apply")(function*(decide: (state: TaskState, now: Date) => Outcome) {
      for (let round = 0; round < MAX_CAS_ROUNDS; round++) {
        const state = yield* current
        if (state.task.writeEpoch > store.fence().epoch) {
          return yield* new WriteFenced({ reason: `task written under epoch ${state.task.writeEpoch}` })
        }
        const now = new Date(yield* Clock.currentTimeMillis)
        const outcome = decide(state, now)
        const change = outcome._tag === "Changed"
          ? outcome.change
          : outcome._tag === "Conflict"
          ? outcome.escalation
          : null
        if (change === null) return result(outcome, state)
        if (!changeIsAllowed(state.task, change)) {
          // a bug in the transition function: refuse the write, keep the entity serving (a defect would replay)
          yield* Effect.logError(`refused transition ${state.task.status} -> ${change.task.status}`)
          return new CommandResult({ outcome: "ignored", reason: "transition_not_allowed", task: state.task }, trusted)
        }
        const committed = yield* store.commit(state.task, change)
        if (committed._tag === "Committed") {
          yield* Ref.set(cache, Option.some({ task: committed.task, attempt: committed.attempt }))
          return result(outcome, committed)
        }
        yield* Ref.set(cache, Option.none())
        yield* Effect.logDebug("version CAS lost: reloading")
      }
      const state = yield* current
      return yield* new VersionConflict({ taskId, expected: state.task.version })
    })
    const apply = (decide: (state: TaskState, now: Date) => Outcome) =>
      decisions.withPermits(1)(applyOnce(decide)).pipe(
        Effect.tap((res) => (res.outcome === "changed" ? Queue.offer(changed, undefined) : Effect.void))
      )

    const observe = (observation: ProviderObservation) =>
      Effect.gen(function*() {
        const res = yield* apply((s, now) => transition(s.task, s.attempt, observation, now))
        if (res.outcome === "conflict") {
          yield* store.recordReconciliation(taskId, observation.attemptId, res.reason ?? "conflict", observation)
          yield* Effect.logWarning("contradictory provider observation sent to reconciliation")
            .pipe(Effect.annotateLogs({ reason: res.reason }))
        }
        return res
      }).pipe(Effect.annotateLogs({ task_id: taskId, trace_id: observation.traceId }))

    let failures = 0
    const handle: TaskHandle = {
      taskId,
      current,
      apply,
      observe,
      waitForChange: (ms) =>
        Effect.ignore(Effect.timeout(Queue.take(changed), Duration.millis(Math.min(ms, 2 ** 31 - 1)))),
      scheduleMemo: null,
      failed: () => ++failures,
      failures: () => failures,
      succeeded: () => {
        failures = 0
      }
    }
    // The lifecycle runs while the task is alive: keepAlive (a persisted self-message) holds the entity in memory
    // and re-activates it on its new runner after a shard move, where this build starts the lifecycle again. An
    // operator's resolution can make a task in manual_review active again: the lifecycle then starts once more.
    const scope = yield* Effect.scope
    let driving = false
    const startLifecycle = Effect.gen(function*() {
      // a finished task (read, or sent a late duplicate) costs no keep-alive write
      const loaded = yield* Ref.get(cache)
      if (driving || (Option.isSome(loaded) && !isActive(loaded.value.task.status))) return
      driving = true
      yield* Effect.gen(function*() {
        yield* Entity.keepAlive(true)
        yield* lifecycle.drive(handle)
        yield* Entity.keepAlive(false)
      }).pipe(
        Effect.ensuring(Effect.sync(() => (driving = false))),
        Effect.provideService(Entity.CurrentAddress, address),
        Effect.forkIn(scope)
      )
    })
    yield* startLifecycle

    return {
      Start: () => Effect.map(current, (s) => s.task),
      GetSnapshot: () => Effect.map(current, (s) => s.task),
      Observe: ({ payload }) => observe(payload),
      Recheck: ({ payload }) =>
        lifecycle.recheck(payload.attemptId).pipe(
          Effect.zipRight(Effect.sync(() => {
            // the poll schedule is in PostgreSQL now: the loop reads it again, at once
            handle.scheduleMemo = null
          })),
          Effect.zipRight(Queue.offer(changed, undefined)),
          Effect.asVoid,
          Effect.annotateLogs({ task_id: taskId, trace_id: payload.traceId })
        ),
      Resolve: ({ payload }) =>
        apply((s, now) =>
          operatorResolve(s, payload.as, new Date(now.getTime() + OPERATOR_OUTPUT_WINDOW_MS), now, {
            source: "operator",
            traceId: payload.traceId
          })
        ).pipe(
          Effect.tap((res) =>
            res.outcome === "changed"
              ? Effect.zipRight(
                Effect.logInfo(`resolved by operator ${payload.operator} as ${payload.as}: ${res.task.status}`)
                  .pipe(Effect.annotateLogs({ reason: payload.reason })),
                startLifecycle
              )
              : Effect.void
          ),
          Effect.annotateLogs({ task_id: taskId, trace_id: payload.traceId })
        ),
      Cancel: ({ payload }) =>
        apply((s, now) => requestCancel(s.task, s.attempt, now, { source: "api", traceId: payload.traceId }))
          .pipe(Effect.annotateLogs({ task_id: taskId, trace_id: payload.traceId }))
    }
  })
)

const isActive = (status: TaskStatus) => !isTerminal(status) && status !== "manual_review"

const result = (outcome: Outcome, state: TaskState): CommandResult => {
  switch (outcome._tag) {
    case "Changed":
      return new CommandResult({ outcome: "changed", reason: null, task: state.task }, trusted)
    case "Unchanged":
      return new CommandResult({ outcome: "unchanged", reason: outcome.reason, task: state.task }, trusted)
    case "Ignored":
      return new CommandResult({ outcome: "ignored", reason: outcome.reason, task: state.task }, trusted)
    case "Conflict":
      return new CommandResult({ outcome: "conflict", reason: outcome.reason, task: state.task }, trusted)
  }
}
