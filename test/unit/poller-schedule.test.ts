import { describe, expect, it } from "@effect/vitest"
import { Clock, Duration, Effect, Fiber, Option, TestClock } from "effect"
import type { TaskState } from "../../src/domain/taskState.js"
import type { CommandResult } from "../../src/entities/GenerationTask.js"
import { makePoller, type PollerDeps, scheduleMemoOf } from "../../src/entities/poller.js"
import type { TaskHandle } from "../../src/entities/taskHandle.js"
import type { PollLease } from "../../src/persistence/AttemptSchedule.js"
import type { ProviderReport } from "../../src/providers/ProviderAdapter.js"
import type { Guarded } from "../../src/quota/ProviderBreaker.js"
import type { AttemptId, TaskId } from "../../src/schema/ids.js"

const report: ProviderReport = {
  providerTaskId: "job-1",
  clientRequestId: null,
  eventType: "poll",
  providerUpdatedAt: null,
  providerSequence: null,
  status: "running",
  stage: null,
  progress: null,
  errorClass: null,
  errorCode: null,
  outputRefs: []
}

/**
 * One attempt's schedule as PostgreSQL keeps it, on the test clock: `finish` writes next_poll_at as the time it runs
 * plus the delay (its statement's now()), and `claim` takes the lease only when that time has come.
 */
const start = (
  observeMs: number,
  memo: TaskHandle["scheduleMemo"] = null,
  options: {
    readonly granted?: boolean
    readonly breaker?: PollerDeps["breaker"]
    /** the task's status after each observation's commit (default: still running) */
    readonly observed?: string
  } = {}
) =>
  Effect.gen(function*() {
    let nextPollAt = 0
    const counts = { gets: 0, grants: 0, claims: 0, lost: 0, queries: 0, releases: 0, putOffs: 0 }
    const deps = {
      // a query is counted when it is sent, right after its slot was granted: a poll whose commit is still in flight
      // when the loop is stopped counted a slot and no query (22 against 21, now and then)
      clients: { get: () => Option.some({ query: () => Effect.sync(() => (counts.queries++, report)) }) },
      schedule: {
        get: () =>
          Effect.sync(
            () => (counts.gets++,
              Option.some({ nextPollAt: new Date(nextPollAt), pollFailures: 0, pollLeaseUntil: null }))
          ),
        claim: () =>
          Effect.map(Clock.currentTimeMillis, (now) => {
            counts.claims++
            if (nextPollAt > now) {
              counts.lost++
              return Option.none<PollLease>()
            }
            return Option.some<PollLease>({ token: "t", latenessMs: 0 })
          }),
        finish: (_: string, __: PollLease, next: { delayMs: number }) =>
          Effect.map(Clock.currentTimeMillis, (now) => {
            nextPollAt = now + next.delayMs
          }),
        release: () => Effect.sync(() => counts.releases++),
        schedule: (_: string, delayMs: number) =>
          Effect.map(Clock.currentTimeMillis, (now) => {
            counts.putOffs++
            nextPollAt = now + delayMs
          })
      },
      quota: { acquireWithin: () => Effect.sync(() => ++counts.grants > 0) },
      // a breaker that stays closed unless the test gives one: this test is about the schedule
      // (test/unit/breaker.test.ts is about breakers)
      breaker: options.breaker ?? {
        admit: () => Effect.succeed({ _tag: "Admitted", probe: false }),
        guard: <A, E>(_: unknown, __: unknown, call: Effect.Effect<A, E>) =>
          Effect.map(Effect.either(call), (result) => ({ _tag: "Sent", result }))
      },
      config: {
        policy: {
          scale: 1,
          expectedMax: Duration.hours(1),
          notFoundGrace: Duration.minutes(2),
          errorCap: Duration.minutes(5)
        },
        pollLease: Duration.seconds(30),
        idleQuotaWait: Duration.minutes(10)
      }
    } as unknown as PollerDeps
    const poller = makePoller(deps)
    const state = {
      task: { status: "running", tenantId: "t1", createdAt: new Date(0) },
      attempt: { id: "a1", provider: "runway", model: "m", providerTaskId: "job-1", submitStartedAt: new Date(0) }
    } as unknown as TaskState
    const handle = {
      taskId: "task-1" as TaskId,
      // the observation's commit waits its turn in the group commit (seconds under load)
      observe: () =>
        Effect.sleep(Duration.millis(observeMs)).pipe(
          Effect.as(
            {
              outcome: "changed",
              reason: null,
              task: { ...state.task, status: options.observed ?? "running" }
            } as unknown as CommandResult
          )
        ),
      scheduleMemo: memo,
      granted: options.granted ?? false,
      traceId: "trace"
    } as unknown as TaskHandle
    // what each poll answered (how soon to look again)
    const answers: Array<number> = []
    // the lifecycle's loop, without the rest of the task: poll, then wait as long as the poll said
    const fiber = yield* Effect.fork(Effect.forever(
      Effect.flatMap(
        Effect.tap(poller.poll(handle, state), (ms) => Effect.sync(() => answers.push(ms))),
        (ms) => ms > 0 ? Effect.sleep(Duration.millis(ms)) : Effect.yieldNow()
      )
    ))
    return { answers, counts, handle, stop: Fiber.interrupt(fiber) }
  })

describe("the poller's schedule on the test clock", () => {
  it.effect("a slow commit of the observation: the next poll waits for next_poll_at, one quota slot per poll", () =>
    Effect.gen(function*() {
      const { counts, stop } = yield* start(3_000)
      for (let i = 0; i < 60; i++) yield* TestClock.adjust(Duration.seconds(5))
      yield* stop
      expect(counts.queries).toBeGreaterThanOrEqual(5)
      // before: the memo was the time before the commit plus the delay, so every poll that changed the task woke
      // 3 s early, took a slot, lost the claim, and took a second slot a second later
      expect(counts.lost).toBe(0)
      expect(counts.grants).toBe(counts.queries)
    }))

  it.effect("a poll woken with its slot: no look at the breaker first; refused, it keeps the slot for its next try", () =>
    Effect.gen(function*() {
      const looks = { peeks: 0, guards: 0 }
      let open = true
      const breaker = {
        admit: () => Effect.sync(() => (looks.peeks++, { _tag: "Admitted", probe: false })),
        guard: <A, E>(_: unknown, __: unknown, call: Effect.Effect<A, E>) =>
          Effect.suspend((): Effect.Effect<Guarded<A, E>> => {
            looks.guards++
            return open
              ? Effect.succeed({ _tag: "Refused", waitMs: 10_000 } as const)
              : Effect.map(Effect.either(call), (result) => ({ _tag: "Sent", result } as const))
          })
      } as unknown as PollerDeps["breaker"]
      const read = { nextPollAt: new Date(0), pollFailures: 0, pollLeaseUntil: null, cancelSentAt: null }
      const { counts, handle, stop } = yield* start(0, scheduleMemoOf("a1" as AttemptId, read, 0), {
        granted: true,
        breaker
      })
      yield* TestClock.adjust(Duration.millis(1))
      // the guard refused: nothing sent, the lease given back, the poll put off, the wake's slot still held
      expect(looks).toEqual({ peeks: 0, guards: 1 })
      expect(counts).toMatchObject({ queries: 0, claims: 1, releases: 1, putOffs: 1, grants: 0 })
      expect(handle.granted).toBe(true)
      open = false
      yield* TestClock.adjust(Duration.seconds(13))
      yield* stop
      // the next try spends the kept slot: sent without a slot of its own and without a look first
      expect(looks).toEqual({ peeks: 0, guards: 2 })
      expect(counts).toMatchObject({ queries: 1, grants: 0 })
      expect(handle.granted).toBe(false)
    }))

  it.effect("a poll that starts with the schedule read with its task (an entity's build) reads it no more", () =>
    Effect.gen(function*() {
      const read = { nextPollAt: new Date(0), pollFailures: 0, pollLeaseUntil: null, cancelSentAt: null }
      const { counts, stop } = yield* start(0, scheduleMemoOf("a1" as AttemptId, read, 0))
      yield* TestClock.adjust(Duration.millis(1))
      yield* stop
      expect(counts.queries).toBe(1)
      // before: a task woken for its poll read its schedule a second time, right after its load had read the row
      expect(counts.gets).toBe(0)
      expect(counts.claims).toBe(1)
    }))

  it.effect("a poll that moved a running task answers its next poll's delay; one that moved it to another step, 0", () =>
    Effect.gen(function*() {
      const read = { nextPollAt: new Date(0), pollFailures: 0, pollLeaseUntil: null, cancelSentAt: null }
      const progressed = yield* start(0, scheduleMemoOf("a1" as AttemptId, read, 0))
      yield* TestClock.adjust(Duration.millis(1))
      yield* progressed.stop
      // before: 0 after every change, so the lifecycle ran a step at once only to find the next poll not due
      expect(progressed.counts.queries).toBe(1)
      expect(progressed.answers.length).toBe(1)
      expect(progressed.answers[0]).toBeGreaterThan(0)
      const succeeded = yield* start(0, scheduleMemoOf("a1" as AttemptId, read, 0), { observed: "provider_succeeded" })
      yield* TestClock.adjust(Duration.millis(1))
      yield* succeeded.stop
      expect(succeeded.answers[0]).toBe(0)
    }))

  it("a read of the schedule that leaves the poll something to do first gives no memo", () => {
    const at = (ms: number | null) => ms === null ? null : new Date(ms)
    const read = (nextPollAt: number | null, pollLeaseUntil: number | null) => ({
      nextPollAt: at(nextPollAt),
      pollFailures: 2,
      pollLeaseUntil: at(pollLeaseUntil),
      cancelSentAt: null
    })
    const a1 = "a1" as AttemptId
    // no poll scheduled yet: the poll schedules its first one
    expect(scheduleMemoOf(a1, read(null, null), 1000)).toBeNull()
    // another holder's lease: the poll waits it out
    expect(scheduleMemoOf(a1, read(500, 2000), 1000)).toBeNull()
    // a lease that lapsed, or none: the memo, with the failures that set the next backoff
    expect(scheduleMemoOf(a1, read(500, 900), 1000)).toEqual({ attemptId: a1, nextPollAt: 500, failures: 2 })
    expect(scheduleMemoOf(a1, read(5000, null), 1000)).toEqual({ attemptId: a1, nextPollAt: 5000, failures: 2 })
  })
})
