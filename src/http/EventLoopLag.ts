import { Context, Duration, Effect, Layer, Metric, Schedule } from "effect"
import { monitorEventLoopDelay } from "node:perf_hooks"

/**
 * Event-loop lag: how late the loop runs a timer that is due. Node's own histogram (perf_hooks
 * monitorEventLoopDelay, sampling every 10 ms in libuv, outside the loop it measures) is read and reset once per
 * window, so each figure describes the last window only: a stall shows for one window, then clears.
 */
export interface LagWindow {
  readonly p50Ms: number
  readonly p99Ms: number
  readonly maxMs: number
  /** The window's length and when it closed (epoch ms). */
  readonly windowMs: number
  readonly at: number
}

export class EventLoopLag extends Context.Tag("EventLoopLag")<EventLoopLag, {
  /** The last closed window (zeros until the first one closes). */
  readonly last: Effect.Effect<LagWindow>
}>() {}

/** `event_loop_lag_seconds{stat="p50"|"p99"|"max"}`: the last window's figures. */
const lagGauge = Metric.gauge("event_loop_lag_seconds", {
  description: "event-loop lag over the last window (perf_hooks monitorEventLoopDelay): stat=p50, p99 or max"
})
const p50 = Metric.tagged(lagGauge, "stat", "p50")
const p99 = Metric.tagged(lagGauge, "stat", "p99")
const max = Metric.tagged(lagGauge, "stat", "max")

const RESOLUTION_MS = 10
const msOf = (ns: number) => Number.isFinite(ns) ? ns / 1e6 : 0

/** The monitor, sampled every `window` by a fiber of the layer's scope; stopped with it. */
export const layerEventLoopLag = (window: Duration.DurationInput = "5 seconds") =>
  Layer.scoped(
    EventLoopLag,
    Effect.gen(function*() {
      const windowMs = Duration.toMillis(window)
      const histogram = yield* Effect.acquireRelease(
        Effect.sync(() => {
          const h = monitorEventLoopDelay({ resolution: RESOLUTION_MS })
          h.enable()
          return h
        }),
        (h) => Effect.sync(() => h.disable())
      )
      let last: LagWindow = { p50Ms: 0, p99Ms: 0, maxMs: 0, windowMs, at: Date.now() }
      // the histogram counts the sampling interval itself into every delay: subtracted, as Node's docs advise
      const lagMs = (ns: number) => Math.max(0, msOf(ns) - RESOLUTION_MS)
      const sample = Effect.suspend(() => {
        last = {
          p50Ms: lagMs(histogram.percentile(50)),
          p99Ms: lagMs(histogram.percentile(99)),
          maxMs: lagMs(histogram.max),
          windowMs,
          at: Date.now()
        }
        histogram.reset()
        return Effect.all([
          Metric.set(p50, last.p50Ms / 1000),
          Metric.set(p99, last.p99Ms / 1000),
          Metric.set(max, last.maxMs / 1000)
        ], { discard: true })
      })
      yield* sample.pipe(Effect.delay(window), Effect.repeat(Schedule.spaced(window)), Effect.forkScoped)
      return { last: Effect.sync(() => last) }
    })
  )
