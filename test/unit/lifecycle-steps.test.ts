import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Fiber, Option, TestClock } from "effect"
import * as Steps from "../../src/domain/lifecycleSteps.js"
import { firstPoll, nextPollAfterFailure, nextPollAfterSuccess, type PollPolicy } from "../../src/domain/pollPolicy.js"
import { changeIsAllowed, type Outcome } from "../../src/domain/transition.js"
import { OutputWork } from "../../src/output/OutputWork.js"
import { ProviderCallFailed } from "../../src/providers/errors.js"
import { advance, advanceToNextPoll, advanceToRetry } from "../../src/testing/Clock.js"
import { ids, makeAttempt, makeTask, t0 } from "../support/fixtures.js"

const meta = { source: "system", traceId: "t" } as const
const now = new Date(t0.getTime() + 60_000)

const changeOf = (o: Outcome) => {
  if (o._tag !== "Changed") throw new Error(`expected a change, got ${o._tag}`)
  return o.change
}

describe("lifecycle steps (pure)", () => {
  it("submission: queued → submitting before the call, then submitted with the provider's id", () => {
    const queued = {
      task: makeTask({ status: "queued", stage: "queued" }),
      attempt: makeAttempt({ submitState: "PREPARED", providerTaskId: null })
    }
    const begun = changeOf(Steps.beginSubmit(queued, now, meta))
    expect([begun.task.status, begun.attempt!.submitState, begun.attempt!.submitStartedAt]).toEqual([
      "submitting",
      "SUBMITTING",
      now
    ])
    expect(changeIsAllowed(queued.task, begun)).toBe(true)
    const submitting = { task: begun.task, attempt: begun.attempt }
    const accepted = changeOf(Steps.submitAccepted(submitting, ids.attempt, "job-9", now, meta))
    expect([accepted.task.status, accepted.task.stage, accepted.attempt!.providerTaskId]).toEqual([
      "submitted",
      "provider_queued",
      "job-9"
    ])
    // a second accept (a replayed response, a lookup after a callback) changes nothing
    expect(
      Steps.submitAccepted({ task: accepted.task, attempt: accepted.attempt }, ids.attempt, "job-9", now, meta)._tag
    ).toBe("Unchanged")
    // a submit already begun is never begun again
    expect(Steps.beginSubmit(submitting, now, meta)._tag).toBe("Ignored")
  })

  it("an unknown submit keeps its attempt; only a confirmed absence makes a new attempt, within the budget", () => {
    const submitting = { task: makeTask(), attempt: makeAttempt({ providerTaskId: null, submitStartedAt: t0 }) }
    const unknown = changeOf(Steps.submitUnknown(submitting, ids.attempt, now, meta))
    expect([unknown.task.status, unknown.attempt!.submitState, unknown.attempt!.unknownSince]).toEqual([
      "submit_unknown",
      "SUBMIT_UNKNOWN",
      t0
    ])
    const state = { task: unknown.task, attempt: unknown.attempt }
    const retried = changeOf(Steps.retrySubmission(state, ids.attempt, 3, "provider_unavailable", now, meta))
    expect(retried.newAttempt).toBe(true)
    expect(retried.task.status).toBe("queued")
    expect(retried.task.stage).toBe("submitting")
    expect(retried.task.currentAttemptId).toBe(retried.attempt!.id)
    expect(retried.attempt).toMatchObject({ attemptNo: 2, submitState: "PREPARED", providerTaskId: null })
    expect(retried.attempt!.clientRequestId).not.toBe(state.attempt!.clientRequestId)
    expect(changeIsAllowed(state.task, retried)).toBe(true)
    const exhausted = changeOf(Steps.retrySubmission(state, ids.attempt, 1, "provider_unavailable", now, meta))
    expect([exhausted.task.status, exhausted.task.errorCode, exhausted.newAttempt]).toEqual([
      "failed",
      "provider_unavailable",
      undefined
    ])
    // an attempt that has a provider job is never replaced
    const known = { task: state.task, attempt: makeAttempt({ submitState: "SUBMIT_UNKNOWN", providerTaskId: "job-1" }) }
    expect(Steps.retrySubmission(known, ids.attempt, 3, "provider_unavailable", now, meta)._tag).toBe("Ignored")
    // the user's cancel of a job the provider never got ends the task
    const canceled = changeOf(
      Steps.retrySubmission(
        { ...state, task: makeTask({ status: "cancel_requested" }) },
        ids.attempt,
        3,
        "provider_unavailable",
        now,
        meta
      )
    )
    expect(canceled.task.status).toBe("canceled")
  })

  it("output: provider_succeeded → fetching_output (deadline fixed) → processing_media → ready with the asset", () => {
    const deadline = new Date(now.getTime() + 3_600_000)
    let s = {
      task: makeTask({ status: "provider_succeeded", stage: "generated", progress: 100 }),
      attempt: makeAttempt({ submitState: "SUCCEEDED" })
    }
    const fetching = changeOf(Steps.beginOutput(s, deadline, now, meta))
    expect([fetching.task.status, fetching.attempt!.outputDeadlineAt]).toEqual(["fetching_output", deadline])
    s = { task: fetching.task, attempt: fetching.attempt! }
    const risk = changeOf(Steps.outputAtRisk(s, now, meta))
    expect(risk.task.status).toBe("output_at_risk")
    expect(
      changeOf(Steps.beginOutput({ task: risk.task, attempt: risk.attempt }, new Date(0), now, meta)).attempt!
        .outputDeadlineAt
    ).toEqual(deadline)
    const stored = changeOf(Steps.outputStored(s, now, meta))
    const ready = changeOf(
      Steps.outputReady({ task: stored.task, attempt: stored.attempt }, "a/b/output.mp4", now, meta)
    )
    expect([ready.task.status, ready.task.stage, ready.task.assetId, ready.publicPayload.asset_id]).toEqual([
      "ready",
      "done",
      "a/b/output.mp4",
      "a/b/output.mp4"
    ])
    for (const [from, c] of [[s.task, stored], [stored.task, ready]] as const) {
      expect(changeIsAllowed(from, c)).toBe(true)
    }
    // steps that no longer apply change nothing
    expect(Steps.outputReady(s, "x", now, meta)._tag).toBe("Ignored")
    expect(Steps.beginOutput({ task: ready.task, attempt: ready.attempt }, deadline, now, meta)._tag).toBe("Ignored")
  })
})

describe("poll policy (seed 12.8.3)", () => {
  const policy: PollPolicy = {
    scale: 1,
    expectedMax: Duration.minutes(30),
    notFoundGrace: Duration.minutes(2),
    errorCap: Duration.minutes(5)
  }
  const failure = (kind: ProviderCallFailed["kind"], retryAfter = Option.none<Duration.Duration>()) =>
    new ProviderCallFailed({ kind, retryAfter, detail: "x" })

  it("intervals by state, with jitter inside the seed's ranges", () => {
    for (const r of [0, 0.5, 0.999]) {
      expect(firstPoll(policy, r)).toBeGreaterThanOrEqual(2000)
      expect(firstPoll(policy, r)).toBeLessThanOrEqual(5000)
      expect(nextPollAfterSuccess("submitted", false, policy, r)).toBeGreaterThanOrEqual(10_000)
      expect(nextPollAfterSuccess("submitted", false, policy, r)).toBeLessThanOrEqual(30_000)
      expect(nextPollAfterSuccess("running", false, policy, r)).toBeGreaterThanOrEqual(5000)
      expect(nextPollAfterSuccess("running", false, policy, r)).toBeLessThanOrEqual(15_000)
      expect(nextPollAfterSuccess("running", true, policy, r)).toBeGreaterThanOrEqual(60_000)
    }
    expect(nextPollAfterSuccess("running", false, { ...policy, scale: 0.05 }, 0)).toBe(250)
  })

  it("429 honors Retry-After; 5xx backs off exponentially up to the cap", () => {
    expect(nextPollAfterFailure(failure("rate_limited", Option.some(Duration.seconds(7))), 1, policy, 0)).toBe(7000)
    const delays = [1, 2, 3, 4, 10, 30].map((n) => nextPollAfterFailure(failure("server"), n, policy, 1))
    expect(delays).toEqual([2000, 4000, 8000, 16000, 300_000, 300_000])
    expect(nextPollAfterFailure(failure("auth"), 1, policy, 0)).toBeGreaterThanOrEqual(60_000)
  })

  // a poller that backs off on the policy's delays, driven by the TestClock: each try happens exactly when the
  // policy says, not a millisecond earlier, and a success goes back to the state's interval
  it.effect("on the test clock, 5xx tries come at 2, 6, 14 s; after a success the next poll is 5–15 s later", () =>
    Effect.gen(function*() {
      const tries: Array<number> = []
      const poller = yield* Effect.fork(Effect.gen(function*() {
        let failures = 1 // the poll at 0 got a 503
        for (const outcome of ["server", "server", "ok", "ok", "ok"]) {
          const delay = failures > 0
            ? nextPollAfterFailure(failure("server"), failures, policy, 1)
            : nextPollAfterSuccess("running", false, policy, 0.5)
          yield* Effect.sleep(Duration.millis(delay))
          tries.push(yield* TestClock.currentTimeMillis)
          failures = outcome === "ok" ? 0 : failures + 1
        }
      }))
      yield* advanceToRetry(policy, failure("server"), 1, 1)
      expect(tries).toEqual([2000])
      yield* advance(Duration.millis(3999))
      expect(tries).toEqual([2000]) // not a millisecond early
      yield* advance(Duration.millis(1))
      expect(tries).toEqual([2000, 6000])
      yield* advanceToRetry(policy, failure("server"), 3, 1)
      expect(tries).toEqual([2000, 6000, 14_000])
      yield* advanceToNextPoll(policy, "running")
      yield* advanceToNextPoll(policy, "running")
      yield* Fiber.join(poller)
      expect(tries).toEqual([2000, 6000, 14_000, 24_000, 34_000])
    }))
})

describe("output work order", () => {
  // on the TestClock: stepping it lets every forked fiber run until it waits (for a permit or the gate)
  it.effect("under a backlog the output with the earliest deadline goes first", () =>
    Effect.gen(function*() {
      const work = yield* OutputWork
      const order: Array<number> = []
      const gate = yield* Effect.makeLatch(false)
      // fill every permit (8 by default) with work that waits at the gate
      const blockers = yield* Effect.forEach(Array.from({ length: 8 }), () => Effect.fork(work.run(null, gate.await)))
      yield* TestClock.adjust(Duration.millis(20))
      const queued = yield* Effect.forEach([30, 10, 20], (d) =>
        Effect.fork(work.run(new Date(d), Effect.sync(() => order.push(d)))))
      yield* TestClock.adjust(Duration.millis(20))
      expect(order).toEqual([]) // nothing ran past the full permits
      yield* gate.open
      yield* Fiber.joinAll(blockers)
      yield* Fiber.joinAll(queued)
      expect(order).toEqual([10, 20, 30])
    }).pipe(Effect.provide(OutputWork.Default)))
})
