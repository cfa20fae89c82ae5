import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Metric, Option } from "effect"
import { RunnerState, stateGauge } from "../../src/http/RunnerState.js"
import { shardLocksHealthy } from "../../src/http/ShardLockWatch.js"

const gauge = (state: string) =>
  Metric.value(stateGauge.pipe(Metric.tagged("state", state))).pipe(Effect.map((g) => g.value))

describe("the runner's serving state (what /readyz reads)", () => {
  it.effect("starting until built, then serving; draining and back; stopping is final", () =>
    Effect.gen(function*() {
      const s = yield* RunnerState
      expect(yield* s.get).toBe("starting")
      // a drain asked for while starting shows once started
      yield* s.setDraining(true)
      expect(yield* s.get).toBe("starting")
      yield* s.setStarted
      expect(yield* s.get).toBe("draining")
      yield* s.setDraining(false)
      expect(yield* s.get).toBe("serving")
      expect([yield* gauge("serving"), yield* gauge("draining")]).toEqual([1, 0])
      yield* s.setStopping
      yield* s.setDraining(false)
      expect(yield* s.get).toBe("stopping")
      expect([yield* gauge("serving"), yield* gauge("stopping")]).toEqual([0, 1])
    }).pipe(Effect.provide(RunnerState.Default)))
})

describe("shard-lock storage as the cluster last saw it", () => {
  const stale = Duration.seconds(6)
  it("healthy only after a recent successful refresh with no failure since", () => {
    const none = Option.none()
    expect(shardLocksHealthy({ lastOk: none, lastFailure: none }, stale, 10_000)).toEqual(
      Option.some("no shard lock refresh yet")
    )
    expect(shardLocksHealthy({ lastOk: Option.some(9_000), lastFailure: none }, stale, 10_000)).toEqual(none)
    expect(shardLocksHealthy({ lastOk: Option.some(1_000), lastFailure: none }, stale, 10_000)).toEqual(
      Option.some("no shard lock refresh for 9 s")
    )
    const failed = { lastOk: Option.some(9_000), lastFailure: Option.some({ at: 9_500, error: "timed out" }) }
    expect(shardLocksHealthy(failed, stale, 10_000)).toEqual(Option.some("shard lock refresh failed: timed out"))
  })
})
