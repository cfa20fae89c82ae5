import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, TestClock } from "effect"
import { makeBreakerWaits } from "../../src/entities/breakerWaits.js"
import type { Route } from "../../src/quota/ProviderBreaker.js"

const runway: Route = { provider: "runway", model: "gen4.5" }
const luma: Route = { provider: "luma", model: "ray-2" }
const INTERVAL = 5_000

describe("tasks waiting for a provider breaker (src/entities/breakerWaits.ts), on the TestClock", () => {
  it.scoped("one look per route and interval, not one per task; once admitted, every task woken once within an interval", () =>
    Effect.gen(function*() {
      const looks: Array<string> = []
      let admitting = new Set<string>()
      const waits = yield* makeBreakerWaits({
        look: (route) =>
          Effect.sync(() => {
            looks.push(route.provider)
            return admitting.has(route.provider)
          }),
        intervalMs: () => INTERVAL
      })
      const woken = new Map<string, number>()
      const wake = (id: string) => () => void woken.set(id, (woken.get(id) ?? 0) + 1)
      for (let i = 0; i < 100; i++) yield* waits.wait(runway, `r${i}`, wake(`r${i}`))
      // a task refused again before the look holds one entry
      yield* waits.wait(runway, "r0", wake("r0"))
      for (let i = 0; i < 10; i++) yield* waits.wait(luma, `l${i}`, wake(`l${i}`))
      expect(waits.waiting()).toBe(110)
      // a task whose lifecycle ended (its entity stopped) leaves: never woken
      yield* waits.wait(runway, "gone", wake("gone"))
      yield* waits.leave("gone")
      expect(waits.waiting()).toBe(110)

      // the breakers stay open for three intervals: three looks per route, nobody woken
      yield* TestClock.adjust(Duration.millis(3 * INTERVAL))
      expect(looks.filter((p) => p === "runway")).toHaveLength(3)
      expect(looks.filter((p) => p === "luma")).toHaveLength(3)
      expect(woken.size).toBe(0)

      // Runway's admits again (a reset, or half-open): its tasks are woken, spread over one interval; Luma's still wait
      admitting = new Set(["runway"])
      yield* TestClock.adjust(Duration.millis(INTERVAL))
      expect(woken.size).toBeGreaterThan(0)
      expect(woken.size).toBeLessThan(100)
      yield* TestClock.adjust(Duration.millis(INTERVAL))
      expect([...woken.keys()].filter((id) => id.startsWith("r"))).toHaveLength(100)
      expect(woken.has("gone")).toBe(false)
      expect([...woken.values()].every((n) => n === 1)).toBe(true)
      expect(waits.waiting()).toBe(10)

      // nobody waits for Runway now: no more looks at it
      const runwayLooks = looks.filter((p) => p === "runway").length
      yield* TestClock.adjust(Duration.millis(3 * INTERVAL))
      expect(looks.filter((p) => p === "runway")).toHaveLength(runwayLooks)
      expect([...woken.keys()].some((id) => id.startsWith("l"))).toBe(false)
    }))
})
