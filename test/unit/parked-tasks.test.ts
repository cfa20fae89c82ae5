import { describe, expect, it } from "@effect/vitest"
import { Clock, Duration, Effect, Fiber, TestClock } from "effect"
import { makeParkedTasks } from "../../src/entities/ParkedTasks.js"
import { QUOTA_DEFERRED } from "../../src/entities/poller.js"
import { parksAfterStep } from "../../src/entities/TaskLifecycle.js"

const scope = { provider: "runway", tenantId: "t1" }

/** The registry's waker on the TestClock: quota slots every `slotMs` (one line, first come first served). */
const start = (options: {
  slotMs: number
  delivered?: (id: string) => boolean
  here?: (id: string) => boolean
  workers?: number
  /** what asking for a slot costs its worker before the quota answers (a Redis round trip behind a busy runner) */
  askMs?: number
}) =>
  Effect.gen(function*() {
    const parked = makeParkedTasks()
    const woken: Array<{ id: string; at: number }> = []
    const waiting = { now: 0, most: 0 }
    let nextSlot = 0
    const fiber = yield* Effect.fork(parked.run({
      tick: Duration.millis(100),
      lead: Duration.millis(500),
      ...(options.workers === undefined ? {} : { workers: options.workers }),
      acquire: () =>
        Effect.gen(function*() {
          if (options.askMs !== undefined) yield* Effect.sleep(Duration.millis(options.askMs))
          const now = yield* Clock.currentTimeMillis
          nextSlot = Math.max(nextSlot, now) + options.slotMs
          waiting.most = Math.max(waiting.most, ++waiting.now)
          yield* Effect.sleep(Duration.millis(nextSlot - options.slotMs - now))
          waiting.now--
        }),
      wake: (id) =>
        Effect.gen(function*() {
          woken.push({ id, at: yield* Clock.currentTimeMillis })
          return options.delivered?.(id) ?? true
        }),
      stillHere: (id) => options.here?.(id) ?? true
    }))
    return { parked, woken, waiting, stop: Fiber.interrupt(fiber) }
  })

describe("parked (idle) tasks on the test clock", () => {
  it.effect("each is woken once, its lead before it is due, in order of due time", () =>
    Effect.gen(function*() {
      const { parked, stop, woken } = yield* start({ slotMs: 0 })
      parked.park("late", { dueAt: 5_000, scope })
      parked.park("early", { dueAt: 2_000, scope })
      yield* TestClock.adjust(Duration.millis(1_400))
      expect(woken).toEqual([])
      yield* TestClock.adjust(Duration.millis(200))
      expect(woken).toEqual([{ id: "early", at: 1_500 }])
      yield* TestClock.adjust(Duration.millis(10_000))
      expect(woken.map((w) => w.id)).toEqual(["early", "late"])
      expect(woken[1]!.at).toBe(4_500)
      expect(parked.size()).toBe(0)
      yield* stop
    }))

  it.effect("a quota line: tasks wait as entries, are woken one slot apart, and a task woken meanwhile is skipped", () =>
    Effect.gen(function*() {
      const { parked, stop, woken } = yield* start({ slotMs: 1_000 })
      for (const id of ["a", "b", "c", "d"]) parked.park(id, { dueAt: 0, scope })
      yield* TestClock.adjust(Duration.millis(100))
      expect(woken.map((w) => w.id)).toEqual(["a"])
      // a webhook woke b's entity: its slot is spent, no Start is sent for it
      parked.unpark("b")
      yield* TestClock.adjust(Duration.millis(5_000))
      expect(woken).toEqual([{ id: "a", at: 0 }, { id: "c", at: 2_000 }, { id: "d", at: 3_000 }])
      yield* stop
    }))

  it.effect("a wake not delivered is tried again; a task whose shard moved away is left to its new owner", () =>
    Effect.gen(function*() {
      let refuse = true
      const { parked, stop, woken } = yield* start({
        slotMs: 0,
        delivered: () => !refuse,
        here: (id) => id !== "moved"
      })
      parked.park("x", { dueAt: 1_000, scope })
      parked.park("moved", { dueAt: 1_000, scope })
      yield* TestClock.adjust(Duration.millis(600))
      expect(woken.map((w) => w.id)).toEqual(["x"])
      refuse = false
      yield* TestClock.adjust(Duration.millis(2_000))
      expect(woken.map((w) => w.id)).toEqual(["x", "x"])
      expect(parked.size()).toBe(0)
      yield* stop
    }))

  it.effect("holds: a task parked or in the quota's line is in hand (a plain Start leaves it), until it is unparked", () =>
    Effect.gen(function*() {
      const { parked, stop, woken } = yield* start({ slotMs: 60_000 })
      parked.park("a", { dueAt: 0, scope })
      parked.park("b", { dueAt: 0, scope })
      parked.park("later", { dueAt: 30_000, scope })
      yield* TestClock.adjust(Duration.millis(100))
      // a woken first; b waits in line for the next slot, a minute away; later is parked until it is due
      expect(woken.map((w) => w.id)).toEqual(["a"])
      const now = yield* Clock.currentTimeMillis
      expect([parked.holds("a", now), parked.holds("b", now), parked.holds("later", now)]).toEqual([false, true, true])
      parked.unpark("later")
      expect(parked.holds("later", now)).toBe(false)
      // an entry that waited far longer than any line (its wake loop stopped) no longer vouches: the sweeper's Start
      // drives the task again
      expect(parked.holds("b", now + 10 * 60_000)).toBe(false)
      yield* stop
    }))

  it.effect("a long line waits as entries: a few workers per scope hold slots, the rest are backlogged, in due order", () =>
    Effect.gen(function*() {
      const { parked, stop, waiting, woken } = yield* start({ slotMs: 100, workers: 4 })
      const other = { provider: "runway", tenantId: "t2" }
      for (let i = 0; i < 50; i++) parked.park(`t${i}`, { dueAt: 1_000 + i, scope })
      parked.park("elsewhere", { dueAt: 1_000, scope: other })
      expect(parked.backlogged(scope)).toBe(false)
      yield* TestClock.adjust(Duration.millis(600))
      // 51 due: 4 in the quota's line per scope (the other scope's one alone), the rest wait as entries
      expect(parked.backlogged(scope)).toBe(true)
      expect(parked.backlogged(other)).toBe(false)
      yield* TestClock.adjust(Duration.millis(10_000))
      expect(waiting.most).toBeLessThanOrEqual(5)
      expect(woken.filter((w) => w.id !== "elsewhere").map((w) => w.id)).toEqual(
        Array.from({ length: 50 }, (_, i) => `t${i}`)
      )
      expect(woken.length).toBe(51)
      expect(parked.backlogged(scope)).toBe(false)
      expect(parked.size()).toBe(0)
      yield* stop
    }))

  it.effect("a busy line keeps the quota's rate when each slot costs its worker a slow round trip", () =>
    Effect.gen(function*() {
      // 200/s (GCRA: a slot not asked for in time is lost), each ask 150 ms before the quota answers: the default
      // workers must hold enough asks at once (16 kept up with 16 / 0.155 s ≈ 100/s; bench:polling lost 4–5%)
      const { parked, stop, woken } = yield* start({ slotMs: 5, askMs: 150 })
      for (let i = 0; i < 700; i++) parked.park(`t${i}`, { dueAt: 1_000, scope })
      yield* TestClock.adjust(Duration.millis(1_000))
      const from = woken.length
      yield* TestClock.adjust(Duration.millis(2_000))
      // 400 slots in these 2 s
      expect(woken.length - from).toBeGreaterThanOrEqual(396)
      yield* stop
    }))

  it.effect("a task that left the line and joined it again keeps only its new place", () =>
    Effect.gen(function*() {
      const { parked, stop, woken } = yield* start({ slotMs: 1_000, workers: 1 })
      parked.park("a", { dueAt: 0, scope })
      parked.park("x", { dueAt: 1, scope })
      parked.park("b", { dueAt: 2, scope })
      yield* TestClock.adjust(Duration.millis(100))
      // a holds the one worker's slot; x and b wait. A webhook wakes x, which parks again, due at once: it joins
      // the line again, behind b
      parked.unpark("x")
      parked.park("x", { dueAt: 0, scope })
      yield* TestClock.adjust(Duration.millis(10_000))
      expect(woken.map((w) => w.id)).toEqual(["a", "b", "x"])
      yield* stop
    }))
})

describe("whether a task parks after a step (TaskLifecycle.parksAfterStep)", () => {
  const step = { delay: 400, polling: true, granted: false, backlogged: () => true, idleAfterMs: 30_000 }

  it("a polling task whose slot is far (its scope backlogged) parks, and so does one told QUOTA_DEFERRED", () => {
    expect(parksAfterStep(step)).toBe(true)
    expect(parksAfterStep({ ...step, delay: QUOTA_DEFERRED, polling: false, backlogged: () => false })).toBe(true)
    expect(parksAfterStep({ ...step, delay: 30_000, backlogged: () => false })).toBe(true)
  })

  it("a task woken with its slot, its poll due within the wake lead, waits for it awake: its slot is not spent", () => {
    expect(parksAfterStep({ ...step, granted: true })).toBe(false)
    // a poll moved far (a webhook's schedule) parks all the same
    expect(parksAfterStep({ ...step, granted: true, delay: 60_000 })).toBe(true)
  })

  it("a task with work to do now, or not polling, stays awake", () => {
    expect(parksAfterStep({ ...step, delay: 0 })).toBe(false)
    expect(parksAfterStep({ ...step, polling: false })).toBe(false)
  })
})
