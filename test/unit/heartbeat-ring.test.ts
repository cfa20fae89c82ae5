import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Fiber, TestClock } from "effect"
import { HeartbeatRing } from "../../src/http/heartbeatRing.js"

describe("HeartbeatRing", () => {
  it.effect("beats every member once per interval, a tenth of them every 100 ms, and never one that left", () =>
    Effect.gen(function*() {
      const ring = new HeartbeatRing<number>(Duration.seconds(1))
      for (let i = 0; i < 100; i++) ring.add(i)
      ring.add(5) // already a member: still one beat per interval
      expect(ring.size).toBe(100)
      const beats = new Map<number, number>()
      const perTick: Array<number> = []
      let tick = 0
      const fiber = yield* Effect.fork(ring.beat((i) => {
        beats.set(i, (beats.get(i) ?? 0) + 1)
        tick++
      }))
      // the first spoke beats at once, then one per 100 ms
      for (let t = 0; t < 10; t++) {
        yield* TestClock.adjust(Duration.millis(t === 0 ? 0 : 100))
        yield* Effect.yieldNow()
        perTick.push(tick)
        tick = 0
      }
      expect(perTick).toEqual(Array.from({ length: 10 }, () => 10))
      expect([...beats.values()].every((n) => n === 1)).toBe(true)
      expect(beats.size).toBe(100)

      // one leaves, one joins: the leaver never beats again, the newcomer within the next interval
      expect(ring.delete(42)).toBe(true)
      expect(ring.delete(42)).toBe(false)
      ring.add(1000)
      yield* TestClock.adjust(Duration.seconds(1))
      yield* Effect.yieldNow()
      expect(beats.get(42)).toBe(1)
      expect(beats.get(1000)).toBe(1)
      expect(beats.get(7)).toBe(2)
      expect(ring.has(42)).toBe(false)
      expect([...ring].length).toBe(100)
      yield* Fiber.interrupt(fiber)
    }))

  it.effect("an interval shorter than two ticks is one spoke: everyone beats each interval", () =>
    Effect.gen(function*() {
      const ring = new HeartbeatRing<string>(Duration.millis(150))
      ring.add("a")
      ring.add("b")
      const seen: Array<string> = []
      const fiber = yield* Effect.fork(ring.beat((s) => seen.push(s)))
      yield* Effect.yieldNow()
      expect(seen).toEqual(["a", "b"])
      yield* TestClock.adjust(Duration.millis(150))
      yield* Effect.yieldNow()
      expect(seen).toEqual(["a", "b", "a", "b"])
      yield* Fiber.interrupt(fiber)
    }))
})
