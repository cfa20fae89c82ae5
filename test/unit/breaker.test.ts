import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Either, Layer, Option, TestClock } from "effect"
import * as B from "../../src/domain/breaker.js"
import { ProviderBreaker } from "../../src/quota/ProviderBreaker.js"
import { Redis } from "../../src/redis/Redis.js"
import { withSettings } from "../../src/testing/TestRunner.js"

const config: B.BreakerConfig = {
  errorRate: 0.5,
  minCalls: 4,
  windowMs: 10_000,
  openForMs: 1_000,
  openMaxMs: 4_000,
  probes: 2,
  probeTimeoutMs: 5_000
}

/** Runs outcomes (true: a fault) at `at` ms, one after the other, from `st`. */
const recordAll = (st: B.BreakerState, at: number, faults: ReadonlyArray<boolean>) =>
  faults.reduce((s, fault) => B.record(s, at, config, fault, false).state, st)

const fresh = B.closedState("runway", "gen4.5", 0)

const tripped = () => recordAll(fresh, 100, [true, true, true, true])

describe("provider breaker: the state machine", () => {
  it("stays closed below the minimum number of calls, whatever their error rate", () => {
    const st = recordAll(fresh, 100, [true, true, true])
    expect(st.s).toBe("closed")
    const opened = B.record(st, 100, config, true, false)
    expect(opened.state.s).toBe("open")
    expect(opened.from).toBe("closed")
    expect(opened.state.until).toBe(100 + config.openForMs)
  })

  it("opens at the threshold error rate, not below it", () => {
    // 1 fault in 4: 25% < 50%
    expect(recordAll(fresh, 100, [true, false, false, false]).s).toBe("closed")
    // 2 in 4: 50% reaches it
    expect(recordAll(fresh, 100, [true, false, true, false]).s).toBe("open")
  })

  it("forgets calls older than the window (sliding, in buckets of a tenth)", () => {
    const old = recordAll(fresh, 100, [true, true, true])
    // the old faults fell out of the window: one new fault among few calls does not open it
    const later = recordAll(old, 100 + config.windowMs + 1_000, [true])
    expect(later.s).toBe("closed")
    expect(Object.values(later.b).reduce((n, [c]) => n + c, 0)).toBe(1)
    // within the window they count
    expect(recordAll(old, 100 + config.windowMs / 2, [true]).s).toBe("open")
  })

  it("refuses while open, with the time left; half-opens after the cool-down with a limited number of probes", () => {
    const st = tripped()
    const refused = B.admit(st, 600, config, true)
    expect(refused.result).toEqual({ _tag: "Refused", waitMs: 500 })
    const first = B.admit(st, 1_100, config, true)
    expect(first.from).toBe("open")
    expect(first.state.s).toBe("half_open")
    expect(first.result).toEqual({ _tag: "Admitted", probe: true })
    const second = B.admit(first.state, 1_100, config, true)
    expect(second.result).toEqual({ _tag: "Admitted", probe: true })
    // both probes are out: the next caller waits (a quarter of the cool-down at most)
    const third = B.admit(second.state, 1_100, config, true)
    expect(third.result).toEqual({ _tag: "Refused", waitMs: config.openForMs / 4 })
    // a look (claim false) takes no probe
    const looked = B.admit(first.state, 1_100, config, false)
    expect(looked.state.probes).toBe(first.state.probes)
  })

  it("closes after as many probe successes as probes, with an empty window", () => {
    const half = B.admit(B.admit(tripped(), 1_100, config, true).state, 1_100, config, true).state
    const one = B.record(half, 1_200, config, false, true)
    expect(one.state.s).toBe("half_open")
    expect(one.from).toBeNull()
    const two = B.record(one.state, 1_300, config, false, true)
    expect(two.state.s).toBe("closed")
    expect(two.from).toBe("half_open")
    expect(two.state.trips).toBe(0)
    expect(two.state.b).toEqual({})
  })

  it("re-opens on a probe's fault, its cool-down doubling up to the maximum", () => {
    let st = tripped()
    let at = 100
    const coolDowns: Array<number> = []
    for (let i = 0; i < 4; i++) {
      at = st.until
      const probe = B.admit(st, at, config, true)
      const failed = B.record(probe.state, at, config, true, true)
      expect(failed.from).toBe("half_open")
      expect(failed.state.s).toBe("open")
      coolDowns.push(failed.state.until - at)
      st = failed.state
    }
    expect(coolDowns).toEqual([2_000, 4_000, 4_000, 4_000])
  })

  it("ignores outcomes of calls let through before it opened", () => {
    const st = tripped()
    expect(B.record(st, 200, config, false, false).state).toEqual(st)
    const half = B.admit(st, 1_100, config, true).state
    // a non-probe success while half-open does not close it
    expect(B.record(half, 1_200, config, false, false).state).toEqual(half)
  })

  it("lets new probes through when a round's probes never report", () => {
    const half = B.admit(B.admit(tripped(), 1_100, config, true).state, 1_100, config, true).state
    expect(B.admit(half, 1_200, config, true).result._tag).toBe("Refused")
    const lapsed = B.admit(half, 1_100 + config.probeTimeoutMs, config, true)
    expect(lapsed.result).toEqual({ _tag: "Admitted", probe: true })
  })

  it("shows an open breaker whose cool-down is over as half-open", () => {
    const st = tripped()
    expect(B.observed(st, 500)).toBe("open")
    expect(B.observed(st, 1_100)).toBe("half_open")
  })
})

/** The service without Redis (its local breakers), on the TestClock. */
const LocalBreaker = ProviderBreaker.Default.pipe(
  Layer.provide(Layer.succeed(Redis, Redis.of({ client: Option.none(), keyPrefix: "unit:" }))),
  Layer.provide(withSettings({
    BREAKER_MIN_CALLS: "4",
    BREAKER_ERROR_RATE: "0.5",
    BREAKER_WINDOW: "10 seconds",
    BREAKER_OPEN_FOR: "2 seconds",
    BREAKER_PROBES: "1"
  }))
)

const route = { provider: "runway", model: "gen4.5" }
const other = { provider: "runway", model: "veo3.1" }
const failing = Effect.fail("HTTP 503")
const fine = Effect.succeed("ok")

describe("provider breaker: the service's local breakers on the TestClock", () => {
  it.effect("trips one route only, refuses without calling, half-opens after the cool-down and closes", () =>
    Effect.gen(function*() {
      const breaker = yield* ProviderBreaker
      for (let i = 0; i < 4; i++) yield* breaker.guard(route, "query", failing, () => true)
      let calls = 0
      const counted = Effect.sync(() => ++calls)
      const refused = yield* breaker.guard(route, "query", counted, () => true)
      expect(refused).toEqual({ _tag: "Refused", waitMs: 2_000 })
      expect(calls).toBe(0)
      // another model of the same provider is unaffected
      const elsewhere = yield* breaker.guard(other, "query", counted, () => true)
      expect(elsewhere._tag).toBe("Sent")
      expect(calls).toBe(1)

      yield* TestClock.adjust(Duration.seconds(2))
      const probe = yield* breaker.guard(route, "query", fine, () => true)
      expect(probe._tag === "Sent" && Either.isRight(probe.result)).toBe(true)
      const { breakers } = yield* breaker.list
      expect(breakers.find((b) => b.model === "gen4.5")?.state).toBe("closed")
    }).pipe(Effect.provide(LocalBreaker)))

  it.effect("a credential's breaker (401/403) refuses every model of the provider until it lapses or is reset", () =>
    Effect.gen(function*() {
      const breaker = yield* ProviderBreaker
      yield* breaker.tripCredential("runway", 5_000)
      const refused = yield* breaker.admit(other, "submit")
      expect(refused).toEqual({ _tag: "Refused", waitMs: 5_000 })
      expect((yield* breaker.admit({ provider: "luma", model: "ray-2" }, "submit"))._tag).toBe("Admitted")
      const reset = yield* breaker.reset("runway", Option.none())
      expect(reset).toContainEqual({ provider: "runway", model: "*", from: "open" })
      expect((yield* breaker.admit(other, "submit"))._tag).toBe("Admitted")
    }).pipe(Effect.provide(LocalBreaker)))
})
