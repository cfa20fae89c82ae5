import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Metric, MetricBoundaries } from "effect"
import { encode, formatValue, metricName } from "../../src/observability/Prometheus.js"

/** This file's metrics only (the registry is global): each test uses its own name prefix. */
const exposition = (prefix: string) =>
  Effect.map(Metric.snapshot, (pairs) => encode(pairs.filter((p) => p.metricKey.name.startsWith(prefix))))

describe("Prometheus exposition", () => {
  it.effect("counters are named _total, with HELP and TYPE once per family and one line per label set", () =>
    Effect.gen(function*() {
      const polls = Metric.counter("t1_polls", { description: "polls sent" })
      yield* Metric.incrementBy(Metric.tagged(polls, "provider", "fal"), 3)
      yield* Metric.increment(Metric.tagged(polls, "provider", "luma"))
      const done = Metric.counter("t1_done_total", { description: "already suffixed" })
      yield* Metric.increment(done)
      expect(yield* exposition("t1_")).toBe(
        [
          "# HELP t1_done_total already suffixed",
          "# TYPE t1_done_total counter",
          "t1_done_total 1",
          "# HELP t1_polls_total polls sent",
          "# TYPE t1_polls_total counter",
          "t1_polls_total{provider=\"fal\"} 3",
          "t1_polls_total{provider=\"luma\"} 1",
          ""
        ].join("\n")
      )
    }))

  it.effect("gauges, bigint gauges (@effect/cluster's) and a description-less metric", () =>
    Effect.gen(function*() {
      yield* Metric.set(Metric.gauge("t2_backlog", { description: "rows" }), 12.5)
      yield* Metric.set(Metric.gauge("t2_shards", { bigint: true }), BigInt(300))
      expect(yield* exposition("t2_")).toBe(
        [
          "# HELP t2_backlog rows",
          "# TYPE t2_backlog gauge",
          "t2_backlog 12.5",
          "# HELP t2_shards t2_shards",
          "# TYPE t2_shards gauge",
          "t2_shards 300",
          ""
        ].join("\n")
      )
    }))

  it.effect("histograms: cumulative buckets in le order, +Inf equal to the count, _sum and _count", () =>
    Effect.gen(function*() {
      const h = Metric.histogram(
        "t3_latency_seconds",
        MetricBoundaries.fromIterable([0.1, 0.5, 2.5, 10]),
        "persist latency"
      ).pipe(Metric.tagged("provider", "fal"))
      for (const v of [0.05, 0.1, 0.3, 3, 60]) yield* Metric.update(h, v)
      expect(yield* exposition("t3_")).toBe(
        [
          "# HELP t3_latency_seconds persist latency",
          "# TYPE t3_latency_seconds histogram",
          "t3_latency_seconds_bucket{provider=\"fal\",le=\"0.1\"} 2",
          "t3_latency_seconds_bucket{provider=\"fal\",le=\"0.5\"} 3",
          "t3_latency_seconds_bucket{provider=\"fal\",le=\"2.5\"} 3",
          "t3_latency_seconds_bucket{provider=\"fal\",le=\"10\"} 4",
          "t3_latency_seconds_bucket{provider=\"fal\",le=\"+Inf\"} 5",
          "t3_latency_seconds_sum{provider=\"fal\"} 63.45",
          "t3_latency_seconds_count{provider=\"fal\"} 5",
          ""
        ].join("\n")
      )
    }))

  it.effect("label values are escaped (backslash, quote, newline); names made legal", () =>
    Effect.gen(function*() {
      const c = Metric.counter("t4_odd.name-x", { description: "line one\nback\\slash" })
      yield* Metric.increment(Metric.tagged(c, "reason", "a \"quoted\"\\path\nnext"))
      expect(yield* exposition("t4_")).toBe(
        [
          "# HELP t4_odd_name_x_total line one\\nback\\\\slash",
          "# TYPE t4_odd_name_x_total counter",
          "t4_odd_name_x_total{reason=\"a \\\"quoted\\\"\\\\path\\nnext\"} 1",
          ""
        ].join("\n")
      )
      expect(metricName("9lives")).toBe("_9lives")
    }))

  it.effect("frequencies are counters by key; summaries give their quantiles, _sum and _count", () =>
    Effect.gen(function*() {
      const f = Metric.frequency("t5_outcomes", { description: "outcomes" })
      for (const w of ["ok", "ok", "rate_limited"]) yield* Metric.update(f, w)
      const s = Metric.summary({
        name: "t5_lag_seconds",
        maxAge: Duration.minutes(1),
        maxSize: 10,
        error: 0,
        quantiles: [0.5]
      })
      for (const v of [1, 2, 3]) yield* Metric.update(s, v)
      const text = yield* exposition("t5_")
      expect(text).toContain("# TYPE t5_outcomes_total counter\nt5_outcomes_total{key=\"ok\"} 2\n")
      expect(text).toContain("t5_outcomes_total{key=\"rate_limited\"} 1\n")
      expect(text).toContain("# TYPE t5_lag_seconds summary\n")
      expect(text).toMatch(/t5_lag_seconds\{quantile="0\.5"\} \d/)
      expect(text).toContain("t5_lag_seconds_sum 6\nt5_lag_seconds_count 3\n")
    }))

  it.effect("a name used by two kinds keeps the first kind: a scrape Prometheus would refuse is never written", () =>
    Effect.gen(function*() {
      yield* Metric.increment(Metric.counter("t6_clash_total"))
      yield* Metric.set(Metric.gauge("t6_clash_total"), 5)
      const text = yield* exposition("t6_")
      expect(text.match(/# TYPE/g)).toHaveLength(1)
      expect(text).not.toContain(" 5\n")
    }))

  it("values: infinities and NaN as Prometheus spells them", () => {
    expect([formatValue(Infinity), formatValue(-Infinity), formatValue(NaN), formatValue(BigInt(7))]).toEqual([
      "+Inf",
      "-Inf",
      "NaN",
      "7"
    ])
  })
})
