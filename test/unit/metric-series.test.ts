import { describe, expect, it } from "@effect/vitest"
import { Effect, Metric, MetricBoundaries } from "effect"
import { labelled, seriesBy } from "../../src/observability/series.js"

describe("seriesBy", () => {
  it.effect("one series per label values, made once, counted under those labels", () =>
    Effect.gen(function*() {
      const counter = Metric.counter(`series_test_${Date.now()}`)
      const by = seriesBy(counter, "provider", "outcome")
      expect(by("openai", "ok")).toBe(by("openai", "ok"))
      expect(by("openai", "ok")).not.toBe(by("openai", "failed"))
      yield* Metric.increment(by("openai", "ok"))
      yield* Metric.increment(by("openai", "ok"))
      yield* Metric.increment(by("runway", "ok"))
      expect((yield* Metric.value(Metric.tagged(Metric.tagged(counter, "provider", "openai"), "outcome", "ok"))).count)
        .toBe(2)
      expect((yield* Metric.value(Metric.tagged(Metric.tagged(counter, "provider", "runway"), "outcome", "ok"))).count)
        .toBe(1)
    }))

  it.effect("updated in plain code and with a fiber's own labels, as Metric.tagged would count them", () =>
    Effect.gen(function*() {
      const counter = Metric.counter(`series_test_plain_${Date.now()}`)
      const by = seriesBy(counter, "provider")
      by("openai").unsafeUpdate(1, [])
      by("openai").unsafeUpdate(1, [])
      yield* Metric.increment(by("openai")).pipe(Effect.tagMetrics("region", "eu"))
      expect((yield* Metric.value(Metric.tagged(counter, "provider", "openai"))).count).toBe(2)
      expect((yield* Metric.value(Metric.tagged(Metric.tagged(counter, "provider", "openai"), "region", "eu"))).count)
        .toBe(1)
    }))

  it.effect("labelled: a metric with fixed labels counts as Metric.tagged with the same labels", () =>
    Effect.gen(function*() {
      const histogram = Metric.histogram(
        `series_test_histogram_${Date.now()}`,
        MetricBoundaries.linear({ start: 0, width: 1, count: 3 })
      )
      const series = labelled(histogram, { writer: "inbox", outcome: "ok" })
      series.unsafeUpdate(1, [])
      yield* Metric.update(series, 2)
      const state = yield* Metric.value(Metric.tagged(Metric.tagged(histogram, "writer", "inbox"), "outcome", "ok"))
      expect([state.count, state.sum]).toEqual([2, 3])
    }))
})
