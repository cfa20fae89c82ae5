import { Runner, RunnerAddress, RunnerStorage } from "@effect/cluster"
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Fiber, Option, Queue, TestClock } from "effect"
import { withRunnerChanges } from "../../src/cluster/RunnerChanges.js"

const self = RunnerAddress.make("127.0.0.1", 34500)

/** A runner list storage counting its reads, and the announcements made through the wrapper. */
const setup = (interval: Duration.DurationInput) =>
  Effect.gen(function*() {
    let reads = 0
    const announced: Array<string> = []
    const inner = RunnerStorage.RunnerStorage.of({
      getRunners: Effect.sync(() => {
        reads++
        return [[Runner.make({ address: self, groups: ["default"], weight: 1 }), true] as const]
      }),
      register: () => Effect.succeed(1),
      unregister: () => Effect.void
    } as never)
    const wake = yield* Queue.sliding<void>(1)
    const storage = withRunnerChanges(inner, {
      interval: Duration.decode(interval),
      wake,
      announce: (change) => Effect.sync(() => void announced.push(change))
    })
    return { storage, wake, announced, reads: () => reads }
  })

/** Whether the fiber has ended (answered) without moving the clock. */
const done = <A, E>(fiber: Fiber.Fiber<A, E>) => Effect.map(Fiber.poll(fiber), Option.isSome)

describe("the runner list: read at the interval, or at once when a runner joins or leaves", () => {
  it.effect("the first read is at once; the next waits for the interval", () =>
    Effect.gen(function*() {
      const s = yield* setup("1 second")
      yield* s.storage.getRunners
      expect(s.reads()).toBe(1)
      const next = yield* Effect.fork(s.storage.getRunners)
      yield* TestClock.adjust("500 millis")
      expect(yield* done(next)).toBe(false)
      yield* TestClock.adjust("500 millis")
      yield* Fiber.join(next)
      expect(s.reads()).toBe(2)
    }))

  it.effect("a NOTIFY (a wake) brings the read forward", () =>
    Effect.gen(function*() {
      const s = yield* setup("1 second")
      yield* s.storage.getRunners
      const next = yield* Effect.fork(s.storage.getRunners)
      yield* TestClock.adjust("100 millis")
      yield* Queue.offer(s.wake, undefined)
      yield* Fiber.join(next)
      expect(s.reads()).toBe(2)
    }))

  it.effect("a long interval: each call waits at most 2 s (the library times a read out at 5 s) and answers the last list", () =>
    Effect.gen(function*() {
      const s = yield* setup("10 minutes")
      const first = yield* s.storage.getRunners
      const next = yield* Effect.fork(s.storage.getRunners)
      yield* TestClock.adjust("2 seconds")
      expect(yield* Fiber.join(next)).toBe(first)
      expect(s.reads()).toBe(1)
    }))

  it.effect("joins and leaves are announced; a runner that left is not woken by NOTIFYs any more", () =>
    Effect.gen(function*() {
      const s = yield* setup("1 second")
      yield* s.storage.getRunners
      yield* s.storage.register(Runner.make({ address: self, groups: ["default"], weight: 1 }), true)
      // the library registers when it did not find itself: the next read is at once
      yield* s.storage.getRunners
      expect(s.reads()).toBe(2)
      // the library's loop is waiting when its runner leaves (Sharding's stop runs before that loop is interrupted),
      // and its own NOTIFY comes back to it
      const next = yield* Effect.fork(s.storage.getRunners)
      yield* TestClock.adjust("10 millis")
      yield* s.storage.unregister(self)
      expect(s.announced).toEqual(["joined", "left"])
      yield* Queue.offer(s.wake, undefined)
      yield* TestClock.adjust("490 millis")
      expect(yield* done(next)).toBe(false)
      expect(s.reads()).toBe(2)
      yield* TestClock.adjust("500 millis")
      yield* Fiber.join(next)
      expect(s.reads()).toBe(3)
    }))
})
