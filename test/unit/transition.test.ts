import { describe, expect, it } from "@effect/vitest"
import * as fc from "fast-check"
import { changeIsAllowed, type Outcome, requestCancel, transition } from "../../src/domain/transition.js"
import type { ProviderObservation } from "../../src/schema/observation.js"
import { type AttemptSnapshot, stageRank, type TaskSnapshot } from "../../src/schema/task.js"
import { ids, makeAttempt, makeTask, observe, t0 } from "../support/fixtures.js"

const at = (seconds: number) => new Date(t0.getTime() + seconds * 1000)

interface State {
  readonly task: TaskSnapshot
  readonly attempt: AttemptSnapshot
}

/** Applies observations in order, like the entity does, and records every outcome. */
const run = (start: State, deliveries: ReadonlyArray<ProviderObservation>, secondsBetween: number) => {
  let state = start
  const outcomes: Array<Outcome> = []
  deliveries.forEach((o, i) => {
    const outcome = transition(state.task, state.attempt, o, at((i + 1) * secondsBetween))
    outcomes.push(outcome)
    const change = outcome._tag === "Changed" ? outcome.change : outcome._tag === "Conflict" ? outcome.escalation : null
    if (change !== null) state = { task: change.task, attempt: change.attempt ?? state.attempt }
  })
  return { state, outcomes }
}

const start: State = { task: makeTask(), attempt: makeAttempt() }

describe("transition: examples", () => {
  it("maps provider statuses onto task statuses; provider success is not ready", () => {
    const succeeded = observe("succeeded")
    const { state } = run(start, [observe("queued"), observe("running", { progress: 10 }), succeeded], 3)
    expect(state.task.status).toBe("provider_succeeded")
    expect(state.task.stage).toBe("generated")
    expect(state.task.version).toBe(5)
    expect(state.attempt.submitState).toBe("SUCCEEDED")
    expect(state.attempt.outputRefs).toEqual(succeeded.outputRefs)
  })

  it("ignores an observation from a non-current attempt", () => {
    const outcome = transition(start.task, start.attempt, observe("succeeded", { attemptId: ids.oldAttempt }), at(1))
    expect(outcome).toMatchObject({ _tag: "Ignored", reason: "stale_attempt" })
  })

  it("ignores a stale provider sequence", () => {
    const { outcomes, state } = run(start, [
      observe("running", { progress: 50, seq: 5 }),
      observe("running", { progress: 60, seq: 4 })
    ], 3)
    expect(outcomes[1]).toMatchObject({ _tag: "Ignored", reason: "stale_sequence" })
    expect(state.task.progress).toBe(50)
  })

  it("never moves back: a late queued after running is ignored, progress never decreases in a stage", () => {
    const { outcomes, state } = run(start, [
      observe("running", { stage: "generating", progress: 70 }),
      observe("queued"),
      observe("running", { stage: "starting" }),
      observe("running", { stage: "generating", progress: 40 })
    ], 3)
    expect(outcomes.slice(1).map((o) => o._tag)).toEqual(["Ignored", "Ignored", "Ignored"])
    expect(state.task).toMatchObject({ status: "running", stage: "generating", progress: 70 })
  })

  it("progress never goes back when only the status changes within a stage", () => {
    const unknown = makeTask({ status: "provider_status_unknown", stage: "generating", progress: 80 })
    const back = transition(unknown, makeAttempt(), observe("running", { stage: "generating", progress: 40 }), at(1))
    expect(back._tag === "Changed" && back.change.task).toMatchObject({ status: "running", progress: 80 })
  })

  it("coalesces progress: written when it moved >= 5 points or >= 2 s passed", () => {
    const s1 = run(start, [observe("running", { progress: 10 })], 3).state
    const small = transition(s1.task, s1.attempt, observe("running", { progress: 12 }), at(3.5))
    expect(small).toMatchObject({ _tag: "Unchanged", reason: "coalesced" })
    expect(transition(s1.task, s1.attempt, observe("running", { progress: 15 }), at(3.5))._tag).toBe("Changed")
    expect(transition(s1.task, s1.attempt, observe("running", { progress: 12 }), at(5))._tag).toBe("Changed")
    // a stage change is always written
    expect(transition(s1.task, s1.attempt, observe("succeeded"), at(3.1))._tag).toBe("Changed")
  })

  it("terminal states absorb; a contradictory terminal goes to reconciliation, never last-writer-wins", () => {
    const failed = run(start, [observe("failed")], 3).state
    expect(failed.task).toMatchObject({ status: "failed", errorCode: "provider_failed" })
    expect(transition(failed.task, failed.attempt, observe("failed"), at(9))).toMatchObject({ _tag: "Unchanged" })
    expect(transition(failed.task, failed.attempt, observe("running", { progress: 99 }), at(9))).toMatchObject({
      _tag: "Ignored",
      reason: "terminal"
    })
    const late = transition(failed.task, failed.attempt, observe("succeeded"), at(9))
    expect(late).toMatchObject({ _tag: "Conflict", escalation: null })
  })

  it("a contradictory terminal after provider success moves the task to manual_review", () => {
    const done = run(start, [observe("succeeded")], 3).state
    const outcome = transition(done.task, done.attempt, observe("failed"), at(9))
    expect(outcome._tag).toBe("Conflict")
    if (outcome._tag === "Conflict") expect(outcome.escalation?.task.status).toBe("manual_review")
  })

  it("cancel vs success: whichever the provider confirms first wins, never arrival of the cancel", () => {
    const running = run(start, [observe("running", { progress: 30 })], 3).state
    const cancel = requestCancel(running.task, running.attempt, at(4), { source: "api", traceId: "t" })
    expect(cancel._tag).toBe("Changed")
    if (cancel._tag !== "Changed") return
    const requested = { task: cancel.change.task, attempt: running.attempt }
    expect(requested.task.status).toBe("cancel_requested")
    // progress after the cancel request is ignored; success confirmed first is kept (output is fetched)
    expect(transition(requested.task, requested.attempt, observe("running", { progress: 90 }), at(5))._tag).toBe(
      "Ignored"
    )
    const won = run(requested, [observe("succeeded"), observe("canceled")], 3)
    expect(won.state.task.status).toBe("provider_succeeded")
    expect(won.outcomes[1]).toMatchObject({ _tag: "Conflict", escalation: null })
    // the provider confirms the cancel first: success arriving later is a conflict, the task stays canceled
    const lost = run(requested, [observe("canceled"), observe("succeeded")], 3)
    expect(lost.state.task).toMatchObject({ status: "canceled", errorCode: null })
    expect(lost.outcomes[1]).toMatchObject({ _tag: "Conflict", escalation: null })
  })

  it("cancel of a task never sent to a provider is immediate; after provider success it is refused", () => {
    const queued = makeTask({ status: "queued", stage: "queued" })
    const prepared = makeAttempt({ submitState: "PREPARED", providerTaskId: null })
    const c = requestCancel(queued, prepared, at(1), { source: "api", traceId: "t" })
    expect(c._tag === "Changed" && c.change.task.status).toBe("canceled")
    const done = run(start, [observe("succeeded")], 3).state
    expect(requestCancel(done.task, done.attempt, at(9), { source: "api", traceId: "t" })).toMatchObject({
      _tag: "Ignored",
      reason: "not_cancelable"
    })
  })

  it("a webhook naming an attempt whose submit outcome is unknown binds its job; under a cancel, only binds it", () => {
    const unknown = {
      task: makeTask({ status: "submit_unknown", stage: "submitting", progress: null }),
      attempt: makeAttempt({ providerTaskId: null, submitState: "SUBMIT_UNKNOWN", unknownSince: t0 })
    }
    const bound = transition(unknown.task, unknown.attempt, observe("running"), at(1))
    expect(bound._tag === "Changed" && bound.change.task.status).toBe("running")
    expect(bound._tag === "Changed" && bound.change.attempt).toMatchObject({
      providerTaskId: observe("running").providerTaskId,
      submitState: "RUNNING",
      unknownSince: null
    })
    // a cancel asked meanwhile stays asked, with the job now known so that it can be canceled
    const canceling = {
      ...unknown,
      task: makeTask({ status: "cancel_requested", stage: "submitting", progress: null })
    }
    const held = transition(canceling.task, canceling.attempt, observe("running"), at(1))
    expect(held._tag === "Changed" && held.change.task.status).toBe("cancel_requested")
    expect(held._tag === "Changed" && held.change.attempt?.providerTaskId).toBe(observe("running").providerTaskId)
    // a job already known: progress under a cancel is still ignored
    const known = transition(canceling.task, makeAttempt(), observe("running"), at(1))
    expect(known).toMatchObject({ _tag: "Ignored", reason: "cancel_requested" })
  })

  it("public payloads carry only browser-safe fields", () => {
    const failed = observe("failed")
    const { outcomes } = run(start, [failed], 3)
    const o = outcomes[0]!
    expect(o._tag).toBe("Changed")
    if (o._tag !== "Changed") return
    expect(Object.keys(o.change.publicPayload).sort()).toEqual(
      ["asset_id", "error_code", "progress", "stage", "status", "task_id", "task_version"]
    )
    expect(JSON.stringify(o.change.publicPayload)).not.toContain(failed.errorCode)
  })
})

// ---------------------------------------------------------------------------------------------------------------
// Properties: a provider's true history, duplicated and reordered.

interface History {
  readonly truth: ReadonlyArray<ProviderObservation>
  readonly deliveries: ReadonlyArray<ProviderObservation>
}

const historyArb = (withSequence: boolean): fc.Arbitrary<History> =>
  fc.record({
    queued: fc.boolean(),
    starting: fc.boolean(),
    progress: fc.uniqueArray(fc.integer({ min: 1, max: 99 }), { maxLength: 8 }).map((xs) =>
      [...xs].sort((a, b) => a - b)
    ),
    terminal: fc.constantFrom<"succeeded" | "failed" | "canceled" | null>("succeeded", "failed", "canceled", null),
    dupCount: fc.nat({ max: 10 }),
    seed: fc.integer()
  }).chain((h) => {
    const steps: Array<
      Omit<Parameters<typeof observe>[1] & object, "seq"> & { status: ProviderObservation["status"] }
    > = []
    if (h.queued) steps.push({ status: "queued" })
    if (h.starting) steps.push({ status: "running", stage: "starting" })
    for (const p of h.progress) steps.push({ status: "running", stage: "generating", progress: p })
    if (h.terminal !== null) steps.push({ status: h.terminal })
    if (steps.length === 0) steps.push({ status: "queued" })
    const truth = steps.map(({ status, ...s }, i) =>
      observe(status, { ...s, ...(withSequence ? { seq: i + 1 } : {}), eventId: `e${i}` })
    )
    return fc.tuple(
      fc.array(fc.integer({ min: 0, max: truth.length - 1 }), { minLength: h.dupCount, maxLength: h.dupCount }),
      fc.array(fc.nat(), { minLength: truth.length + h.dupCount, maxLength: truth.length + h.dupCount })
    ).map(([dups, keys]) => {
      const all = [...truth, ...dups.map((i) => truth[i]!)]
      const deliveries = all.map((o, i) => ({ o, k: keys[i]! })).sort((a, b) => a.k - b.k).map((x) => x.o)
      return { truth, deliveries }
    })
  })

const expectedFinal = (truth: ReadonlyArray<ProviderObservation>) => {
  const last = truth[truth.length - 1]!
  switch (last.status) {
    case "succeeded":
      return { status: "provider_succeeded", stage: "generated", progress: 100 }
    case "failed":
      return { status: "failed" }
    case "canceled":
      return { status: "canceled" }
    case "queued":
      return { status: "submitted", stage: "provider_queued", progress: null }
    case "running":
      return { status: "running", stage: last.stage ?? "generating", progress: last.progress }
  }
}

/** The provider-path statuses in the order a task can pass them. */
const statusRank: Record<string, number> = {
  submitting: 0,
  submitted: 1,
  running: 2,
  provider_succeeded: 3,
  failed: 4,
  canceled: 4
}

describe("transition: properties", () => {
  for (const withSequence of [true, false]) {
    const label = withSequence ? "with provider sequence" : "without provider sequence"

    it.prop(`final state equals the truth (${label})`, [historyArb(withSequence)], ([{ deliveries, truth }]) => {
      const { state } = run(start, deliveries, 3)
      expect(state.task).toMatchObject(expectedFinal(truth))
    })

    it.prop(
      `versions grow by one, nothing moves backward, moves stay in the table (${label})`,
      [historyArb(withSequence)],
      ([{ deliveries }]) => {
        let state = start
        deliveries.forEach((o, i) => {
          const outcome = transition(state.task, state.attempt, o, at((i + 1) * 3))
          if (outcome._tag !== "Changed") return
          const { change } = outcome
          expect(changeIsAllowed(state.task, change)).toBe(true)
          expect(change.task.version).toBe(state.task.version + 1)
          expect(statusRank[change.task.status]!).toBeGreaterThanOrEqual(statusRank[state.task.status]!)
          expect(stageRank(change.task.stage)).toBeGreaterThanOrEqual(stageRank(state.task.stage))
          if (change.task.stage === state.task.stage && state.task.progress !== null) {
            expect(change.task.progress ?? 0).toBeGreaterThanOrEqual(state.task.progress)
          }
          state = { task: change.task, attempt: change.attempt ?? state.attempt }
        })
      }
    )

    it.prop(
      `applying an observation twice equals applying it once (${label})`,
      [historyArb(withSequence), fc.nat()],
      ([{ deliveries }, pick]) => {
        const prefix = deliveries.slice(0, pick % (deliveries.length + 1))
        const { state } = run(start, prefix, 3)
        const o = deliveries[pick % deliveries.length]!
        const once = transition(state.task, state.attempt, o, at(1000))
        const after = once._tag === "Changed"
          ? { task: once.change.task, attempt: once.change.attempt ?? state.attempt }
          : state
        const twice = transition(after.task, after.attempt, o, at(1001))
        expect(twice._tag).not.toBe("Changed")
      }
    )

    it.prop(
      `with no time between deliveries, coalescing hides less than 5 points of progress (${label})`,
      [historyArb(withSequence)],
      ([{ deliveries, truth }]) => {
        const { state } = run(start, deliveries, 0)
        const expected = expectedFinal(truth)
        expect(state.task.status).toBe(expected.status)
        if (expected.status === "running" && expected.progress != null) {
          expect(expected.progress - (state.task.progress ?? 0)).toBeLessThan(5)
          expect(expected.progress - (state.task.progress ?? 0)).toBeGreaterThanOrEqual(0)
        }
      }
    )
  }
})
