import { Entity, Sharding } from "@effect/cluster"
import { Clock, Duration, Effect, Fiber, Layer, Metric, Option, Ref } from "effect"
import { operatorResolve } from "../domain/lifecycleSteps.js"
import type { TaskState } from "../domain/taskState.js"
import { changeIsAllowed, type Outcome, requestCancel, transition } from "../domain/transition.js"
import { taskChangeWakesSkipped, taskKeepAlivesHeld } from "../observability/metrics.js"
import { LateResults } from "../persistence/LateResults.js"
import { type LoadedTask, TaskStore } from "../persistence/TaskStore.js"
import { TaskNotFound, VersionConflict, WriteFenced } from "../schema/errors.js"
import type { TaskId } from "../schema/ids.js"
import type { ProviderObservation } from "../schema/observation.js"
import { isTerminal, type TaskStatus, trusted } from "../schema/task.js"
import { newTraceId } from "../tracing/TraceId.js"
import { makeChangeSignal } from "./changeSignal.js"
import { CommandResult, GenerationTask } from "./GenerationTask.js"
import { makeInMemoryKeepAlive } from "./inMemoryKeepAlive.js"
import { countObservation, countUnknownSubmitBound, recordLateResult } from "./observationMetrics.js"
import { plainWakesSkipped } from "./ParkedTasks.js"
import { keepsPolling, scheduleMemoOf } from "./poller.js"
import type { TaskHandle } from "./taskHandle.js"
import { LifecycleSettings, TaskLifecycle } from "./TaskLifecycle.js"

/** An operator's "ready" whose output had no deadline yet: the provider's URL is tried for this long. */
const OPERATOR_OUTPUT_WINDOW_MS = 60 * 60 * 1000

/** How many times one message re-evaluates after losing the version CAS before giving up. */
const MAX_CAS_ROUNDS = 5

export const GenerationTaskLive = Layer.unwrapScoped(Effect.map(
  // the scope: where the entities' keep-alives are sent from (inMemoryKeepAlive.ts), the entity type's life here
  Effect.zip(LifecycleSettings.config, Effect.scope),
  // a task entity with nothing to do (idle, finished) leaves memory TASK_ENTITY_IDLE_TIME after its last message
  ([{ entityIdleTime }, keepAliveSends]) => {
    const holdAfter = keepAliveAfter(entityIdleTime)
    return GenerationTask.toLayer(
      Effect.gen(function*() {
        const address = yield* Entity.CurrentAddress
        const taskId = address.entityId as string as TaskId
        const sharding = yield* Sharding.Sharding
        const store = yield* TaskStore
        const lateResults = yield* LateResults
        const lifecycle = yield* TaskLifecycle
        const keepAlive = yield* makeInMemoryKeepAlive(keepAliveSends)
        // the lifecycle fiber and the Rpc handlers both commit: one decision at a time, so neither loses a CAS to
        // the other, and the lifecycle wakes when a handler moved the task
        const decisions = yield* Effect.makeSemaphore(1)
        const changed = makeChangeSignal()
        // Memory is a cache of PostgreSQL: filled at start, replaced by what each commit wrote, dropped on CAS loss.
        const loaded = yield* store.load(taskId).pipe(Effect.orElseSucceed(() => Option.none<LoadedTask>()))
        const cache = yield* Ref.make(Option.map(loaded, stateOf))

        const current = Effect.gen(function*() {
          const cached = yield* Ref.get(cache)
          if (Option.isSome(cached)) return cached.value
          const loaded = Option.map(yield* store.load(taskId), stateOf)
          yield* Ref.set(cache, loaded)
          return yield* Option.match(loaded, {
            onNone: () => Effect.fail(new TaskNotFound({ taskId })),
            onSome: Effect.succeed
          })
        })

        /**
         * The task's log keys, and the work's trace id when the caller names it: around a handler's work (Recheck,
         * Resolve, Cancel), and on an Observe's rare log lines themselves, not around each observation (an
         * `annotateLogs` around every Observe cost ~0.03 ms of CPU).
         */
        const logKeys = (traceId: string | undefined) =>
          Effect.annotateLogs(traceId === undefined ? { task_id: taskId } : { task_id: taskId, trace_id: traceId })

        /**
         * Evaluates `decide` against the current state and commits its change, reloading on a lost CAS. `traceId`: the
         * work's, for the log lines written here (a caller that annotates its own lines leaves it out).
         */
        const applyOnce = Effect.fnUntraced(
          function*(decide: (state: TaskState, now: Date) => Outcome, traceId: string | undefined) {
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
                yield* Effect.logError(`refused transition ${state.task.status} -> ${change.task.status}`).pipe(
                  logKeys(traceId)
                )
                return new CommandResult(
                  { outcome: "ignored", reason: "transition_not_allowed", task: state.task },
                  trusted
                )
              }
              const committed = yield* store.commit(state.task, change)
              if (committed._tag === "Committed") {
                yield* Ref.set(cache, Option.some({ task: committed.task, attempt: committed.attempt }))
                return result(outcome, committed)
              }
              yield* Ref.set(cache, Option.none())
              yield* Effect.logDebug("version CAS lost: reloading").pipe(logKeys(traceId))
            }
            const state = yield* current
            return yield* new VersionConflict({ taskId, expected: state.task.version })
          }
        )
        /** A decision of the lifecycle's own poll: the lifecycle is running, nothing to wake. */
        const applyOwn = (decide: (state: TaskState, now: Date) => Outcome, traceId?: string) =>
          decisions.withPermits(1)(applyOnce(decide, traceId))
        /**
         * A decision of another path (a webhook, a cancel, an operator, or a lifecycle step other than its poll): its
         * change wakes the lifecycle (`changed`) unless it leaves a polling task polling, and says whether it did.
         */
        const applyWaking = (decide: (state: TaskState, now: Date) => Outcome, traceId?: string) =>
          Effect.gen(function*() {
            const decided: { from: TaskStatus | null } = { from: null }
            const res = yield* applyOwn((s, now) => {
              decided.from = s.task.status
              return decide(s, now)
            }, traceId)
            if (res.outcome !== "changed") return { res, woke: false }
            if (decided.from !== null && keepsPolling(decided.from) && keepsPolling(res.task.status)) {
              yield* Metric.increment(taskChangeWakesSkipped)
              return { res, woke: false }
            }
            changed.notify()
            return { res, woke: true }
          })
        const apply = (decide: (state: TaskState, now: Date) => Outcome, traceId?: string) =>
          Effect.map(applyWaking(decide, traceId), ({ res }) => res)

        /**
         * An observation through `decide`: `applyAndWake` for a webhook's (its change wakes the lifecycle), `applyOwn`
         * for the lifecycle's own poll. A poll's change raised the signal too, so the lifecycle, which made it, ran one
         * more step at once and found a change again when it went idle: two steps more for every poll that moved a
         * task (its progress, say).
         */
        const observeWith = (decideWith: typeof apply) => (observation: ProviderObservation) =>
          Effect.gen(function*() {
            // whether the committed decision gave an attempt with no provider task id yet (an unknown submit) its job
            let binds = false
            const res = yield* decideWith((s, now) => {
              const outcome = transition(s.task, s.attempt, observation, now)
              binds = outcome._tag === "Changed" && s.attempt !== null && s.attempt.providerTaskId === null &&
                outcome.change.attempt?.providerTaskId != null
              return outcome
            }, observation.traceId)
            yield* countObservation(observation, res)
            // the rare outcomes' work and log lines, under the task's log keys
            if (binds && res.outcome === "changed") {
              yield* logKeys(observation.traceId)(countUnknownSubmitBound(observation))
            }
            if (res.outcome === "ignored" && res.reason === "stale_attempt") {
              yield* logKeys(observation.traceId)(
                recordLateResult(observation, lateResults.record(taskId, observation))
              )
            }
            if (res.outcome === "conflict") {
              yield* logKeys(observation.traceId)(Effect.zipRight(
                store.recordReconciliation(taskId, observation.attemptId, res.reason ?? "conflict", observation),
                Effect.logWarning("contradictory provider observation sent to reconciliation")
                  .pipe(Effect.annotateLogs({ reason: res.reason }))
              ))
            }
            return res
          })
        let failures = 0
        // starting and stopping the lifecycle are one step each: a handler that starts it never sees it half-stopped
        const lifecycleLock = yield* Effect.makeSemaphore(1)
        let driving = false
        let run = { settled: false }
        const handle: TaskHandle = {
          taskId,
          current,
          apply,
          observe: observeWith(applyOwn),
          waitForChange: changed.wait,
          wake: changed.notify,
          // the schedule read with the task: a build for a poll (a parked task's wake) claims its lease at once
          scheduleMemo: Option.isSome(loaded) && loaded.value.attempt !== null && loaded.value.schedule !== null
            ? scheduleMemoOf(loaded.value.attempt.id, loaded.value.schedule, yield* Clock.currentTimeMillis)
            : null,
          failed: () => ++failures,
          failures: () => failures,
          succeeded: () => {
            failures = 0
          },
          traceId: newTraceId(),
          granted: false,
          settle: lifecycleLock.withPermits(1)(
            Effect.gen(function*() {
              if (changed.take()) return false
              // idle: the keep-alive is answered, so the cluster stops the entity after TASK_ENTITY_IDLE_TIME
              yield* keepAlive.release
              run.settled = true
              driving = false
              return true
            })
          )
        }
        /**
         * The lifecycle was interrupted while this runner still holds the task's shard, so neither a shard move nor a
         * stop (both let the shard go before they stop its entities): the cluster's EntityReaper stopped the entity. It
         * stops any entity TASK_ENTITY_IDLE_TIME after its last message unless the entity's keep-alive has reached it,
         * whatever fiber the entity runs. Then nothing would wake the task: its parked entry went when it started, no
         * look sees its shard change, and the sweeper waits SWEEP_GRACE + QUOTA_MAX_WAIT. So it is parked, as an idle
         * task is, due at its next poll: this runner wakes it with a Start. Measured (cluster-drain.test.ts, two
         * runners on 2 cores, with the keep-alive then a persisted message): ~10 s after a drain, the new owner's
         * reaper stopped 94 of the 101 entities it had woken, between two polls, their shards still there; no
         * keep-alive had reached them (those it had reached lived on). Now the lifecycle hands its keep-alive to the
         * entity in memory first thing, which fails only when the shard is gone (the branch below); this stays for an
         * entity the reaper stopped all the same (test/unit/reaped-lifecycle.test.ts answers its keep-alives
         * without holding it), and for a keep-alive not delivered with the shard still here (a defect).
         * Interrupted, or its keep-alive refused, because the shard left: its next owner resumes the task
         * (ResumeOnAcquire). The shard is noted as left, so that this runner resumes it too if it holds the shard
         * again by its next look (a lock lost and taken back at once, which that look would not see as a change).
         */
        const parkIfStillHere = Effect.gen(function*() {
          if (!sharding.hasShardId(address.shardId)) return lifecycle.shardsLeft.note(address.shardId.toString())
          const state = yield* Effect.option(current)
          if (Option.isNone(state) || state.value.attempt === null || !isActive(state.value.task.status)) return
          const { attempt, task } = state.value
          const memo = handle.scheduleMemo
          const dueAt = memo?.attemptId === attempt.id ? memo.nextPollAt : yield* Clock.currentTimeMillis
          lifecycle.parked.park(taskId, { dueAt, scope: { provider: attempt.provider, tenantId: task.tenantId } })
        })
        // The lifecycle runs while the task is alive: the keep-alive (in memory: inMemoryKeepAlive.ts) holds the
        // entity in memory; after a shard move the next owner's ResumeOnAcquire wakes the task, and this build starts
        // the lifecycle there again. An operator's resolution can make a task in manual_review active again: the
        // lifecycle then starts once more. A task that goes idle (its next poll is far: TaskLifecycle.ts) answers its
        // keep-alive and ends its lifecycle; the runner's ParkedTasks wakes it with a Start, a webhook or a cancel
        // with their message.
        const scope = yield* Effect.scope
        /**
         * The keep-alive of a run still going `holdAfter` in (none for one that settled: a parked task's poll, most
         * runs). Not delivered (the shard left, or a defect): the run ends there, as an interrupted one does.
         */
        const holdIfStillRunning = (thisRun: { settled: boolean }, runFiber: Fiber.RuntimeFiber<unknown, unknown>) =>
          lifecycleLock.withPermits(1)(Effect.suspend(() => {
            if (run !== thisRun || thisRun.settled) return Effect.void
            return Effect.flatMap(
              keepAlive.hold,
              (held) => held ? Metric.increment(taskKeepAlivesHeld) : Fiber.interruptFork(runFiber)
            )
          }))
        const startLifecycleLocked = Effect.gen(function*() {
          // a finished task (read, or sent a late duplicate) costs no keep-alive
          const loaded = yield* Ref.get(cache)
          if (driving) return
          if (Option.isSome(loaded) && !isActive(loaded.value.task.status)) {
            // a parked task finished by a webhook: its wake would only spend a quota slot
            return lifecycle.parked.unpark(taskId)
          }
          driving = true
          const thisRun = (run = { settled: false })
          // forked from the uninterruptible step below: interruptible inside its cleanup, so that an interruption
          // already pending when it starts still parks the task
          const lifecycleRun = Effect.gen(function*() {
            // The keep-alive (a message in memory, sent from here so that the message that started the lifecycle is
            // answered without waiting for it) only matters to a run that outlasts TASK_ENTITY_IDLE_TIME: the reaper
            // counts from the entity's last message, and every run starts within one (a Start, an Observe, a
            // Cancel, a build). So it is held `holdAfter` in (a fifth of that time), by a fiber of the run's that
            // ends with it: a run that settles before sends none. Held at every start, it was a message through the
            // cluster and its answer per run (bench:entity-stop: an active task's entity built for 0.96–1.23 ms of
            // CPU, 0.87–1.03 without)
            const self = yield* Effect.withFiberRuntime<Fiber.RuntimeFiber<unknown, unknown>>(Effect.succeed)
            const holding = yield* Effect.fork(Effect.delay(holdIfStillRunning(thisRun, self), holdAfter))
            yield* lifecycle.drive(handle)
            // ended before this run's own release, so that no hold of it comes after
            yield* Fiber.interrupt(holding)
            if (!thisRun.settled) yield* keepAlive.release
          }).pipe(
            Effect.interruptible,
            // interrupted (the shard moves): the next owner resumes the task (ResumeOnAcquire); interrupted with the
            // shard still here (the reaper): parked here
            Effect.onInterrupt(() => parkIfStillHere),
            Effect.ensuring(Effect.sync(() => {
              if (!thisRun.settled) driving = false
            })),
            Effect.provideService(Entity.CurrentAddress, address)
          )
          // with no interruption between: a build interrupted before leaves the task parked, not lost; one interrupted
          // after (before the keep-alive, too) parks it again or leaves it to the shard's next owner
          yield* Effect.uninterruptible(
            Effect.zipRight(Effect.sync(() => lifecycle.parked.unpark(taskId)), Effect.forkIn(lifecycleRun, scope))
          )
        }).pipe(Effect.provideService(Entity.CurrentAddress, address))
        const startLifecycle = lifecycleLock.withPermits(1)(startLifecycleLocked)
        /**
         * A Start without a quota slot (the sweeper's, a resume), or any first message: the lifecycle starts unless
         * this runner holds the task parked (ParkedTasks.holds), whose own wake brings the slot. The entity then
         * stays idle, as if it had settled: a change of step a handler makes starts it (applyAndWake).
         */
        const startUnlessParked = Effect.gen(function*() {
          if (driving || !lifecycle.parked.holds(taskId, yield* Clock.currentTimeMillis)) return yield* startLifecycle
          run = { settled: true }
          // an entity built for the Start that brings the slot is not a plain wake
          if (!lifecycle.parked.isDelivering(taskId)) yield* Metric.increment(plainWakesSkipped)
        })
        yield* startUnlessParked
        /**
         * A handler's decision (a webhook's, a cancel's): after a change that woke the lifecycle (applyWaking), a
         * lifecycle that went idle starts again (a running one already woke up). Only an idle one: a lifecycle that
         * ended otherwise (a terminal task, or none to drive) is not restarted by every change, which cost a persisted
         * keep-alive per transition (bench:transitions 278/s against ~550/s). Looked at under the lifecycle's lock: a
         * lifecycle settling holds it across its keep-alive's release, and a change seen in that window as "not
         * settled yet" was never acted on (a cancel waited for the next poll: idle-tasks). A change that leaves a
         * polling task polling (a webhook's "running", its progress) starts nothing: a parked task stays parked.
         */
        const applyAndWake = (decide: (state: TaskState, now: Date) => Outcome, traceId?: string) =>
          Effect.flatMap(applyWaking(decide, traceId), ({ res, woke }) =>
            woke
              ? Effect.as(
                lifecycleLock.withPermits(1)(Effect.suspend(() => (run.settled ? startLifecycleLocked : Effect.void))),
                res
              )
              : Effect.succeed(res))
        const observe = observeWith(applyAndWake)

        return {
          Start: ({ payload }) =>
            Effect.gen(function*() {
              const s = yield* current
              if (payload.granted === true) {
                handle.granted = true
                yield* startLifecycle
              } else {
                yield* startUnlessParked
              }
              return s.task
            }),
          GetSnapshot: () => Effect.map(current, (s) => s.task),
          Observe: ({ payload }) => observe(payload),
          Recheck: ({ payload }) =>
            lifecycle.recheck(payload.attemptId).pipe(
              Effect.zipRight(Effect.sync(() => {
                // the poll schedule is in PostgreSQL now: the loop reads it again, at once
                handle.scheduleMemo = null
              })),
              Effect.zipRight(Effect.sync(changed.notify)),
              Effect.zipRight(startLifecycle),
              Effect.asVoid,
              logKeys(payload.traceId)
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
              logKeys(payload.traceId)
            ),
          Cancel: ({ payload }) =>
            applyAndWake((s, now) => requestCancel(s.task, s.attempt, now, { source: "api", traceId: payload.traceId }))
              .pipe(logKeys(payload.traceId))
        }
      }),
      { maxIdleTime: entityIdleTime }
    )
  }
))

/** When a lifecycle run still going holds its keep-alive: a fifth of the entity's idle time, well before the reaper. */
export const keepAliveAfter = (entityIdleTime: Duration.Duration) =>
  Duration.millis(Math.floor(Duration.toMillis(entityIdleTime) / 5))

/** The state in a load, without the poll schedule read with it (stale after the next poll: never cached). */
const stateOf = ({ attempt, task }: LoadedTask): TaskState => ({ task, attempt })

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
