import { describe, expect, it, layer } from "@effect/vitest"
import { Duration, Effect, Fiber, Layer } from "effect"
import { admitTask, observation } from "../../src/testing/builders.js"
import { advanceToFirstPoll, advanceToNextPoll, testPollPolicy } from "../../src/testing/Clock.js"
import { taskTestClient } from "../../src/testing/TaskTestClient.js"
import { layerTestRunner, quietLogs } from "../../src/testing/TestRunner.js"

// Tests on the TestClock come before any `layer(...)` of the file: @effect/vitest's `layer` replaces the file's
// `it.effect` with its own (here on the live clock) for the tests defined after it.
describe("clock control", () => {
  // on the TestClock time moves only when the test moves it: the poll policy's intervals, exactly
  it.effect("polls follow the poll policy, on the test clock", () =>
    Effect.gen(function*() {
      const policy = testPollPolicy()
      const polls: Array<string> = []
      const poller = yield* Effect.fork(Effect.gen(function*() {
        yield* Effect.sleep(Duration.millis(3500)) // firstPoll at jitter 0.5
        polls.push("first")
        yield* Effect.sleep(Duration.millis(20_000)) // a submitted task, jitter 0.5
        polls.push("second")
      }))
      yield* advanceToFirstPoll(policy)
      expect(polls).toEqual(["first"])
      yield* advanceToNextPoll(policy, "submitted")
      yield* Fiber.join(poller)
      expect(polls).toEqual(["first", "second"])
    }))
})

// A whole runner (entities, stores, in-process queue and bus) on an embedded PGlite: no service to start.
const TestRunner = layerTestRunner({ settings: { OUTBOX_SWEEP_INTERVAL: "1 second" } }).pipe(Layer.provide(quietLogs))

describe("building on the control plane", () => {
  // the cluster keeps its own time (shard locks), so the runner's tests run on the live clock
  layer(TestRunner, { excludeTestServices: true })((it) => {
    it.effect("a task follows its provider to success, one version per change", () =>
      Effect.gen(function*() {
        const { attemptId, taskId } = yield* admitTask({ provider: "simulator" })
        const task = yield* taskTestClient(taskId)

        const running = observation(attemptId, "running", { progress: 40 })
        expect((yield* task.observe(running)).outcome).toBe("changed")
        // the same provider event again (a webhook retry) changes nothing
        expect((yield* task.observe(running)).outcome).toBe("unchanged")
        yield* task.observe(observation(attemptId, "succeeded"))

        expect(yield* task.snapshot).toMatchObject({ status: "provider_succeeded", version: 3 })
      }))

    it.effect("a task the provider has not accepted yet is canceled at once", () =>
      Effect.gen(function*() {
        const { taskId } = yield* admitTask()
        const task = yield* taskTestClient(taskId)
        expect((yield* task.cancel()).task.status).toBe("canceled")
      }))
  })
})
