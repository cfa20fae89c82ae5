/**
 * Prometheus text exposition (format 0.0.4) of Effect's metric registry. Every metric of the process is an Effect
 * `Metric` in the one global registry (ours, @effect/cluster's, @effect/sql's if any): `Metric.snapshot` reads them
 * all, and this file writes them as Prometheus reads them. No SDK in between: @effect/opentelemetry's route would
 * need the OpenTelemetry metrics SDK and its Prometheus exporter (another package and a second registry) for the
 * same five kinds of metric, which map one to one:
 *   counter   → `counter`, named `<name>_total` (the suffix added when the definition lacks it)
 *   gauge     → `gauge`
 *   histogram → `histogram`: cumulative `_bucket{le}` (up to `+Inf`), `_sum`, `_count`
 *   summary   → `summary`: `{quantile}`, `_sum`, `_count`
 *   frequency → `counter` `<name>_total` with the counted word as label `key`
 */
import { Option } from "effect"
import type * as MetricPair from "effect/MetricPair"
import * as MetricState from "effect/MetricState"

export const CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

type Kind = "counter" | "gauge" | "histogram" | "summary"

/** Metric names allow [a-zA-Z_:][a-zA-Z0-9_:]*: anything else becomes `_`. */
export const metricName = (name: string): string => {
  const safe = name.replace(/[^a-zA-Z0-9_:]/g, "_")
  return /^[a-zA-Z_:]/.test(safe) ? safe : `_${safe}`
}

/** Label names allow [a-zA-Z_][a-zA-Z0-9_]* (no colon); `__` is reserved for Prometheus itself. */
const labelName = (name: string): string => {
  const safe = name.replace(/[^a-zA-Z0-9_]/g, "_")
  const start = /^[a-zA-Z_]/.test(safe) ? safe : `_${safe}`
  return start.startsWith("__") ? `x${start}` : start
}

const escapeLabel = (value: string) => value.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, "\\\"")
const escapeHelp = (text: string) => text.replace(/\\/g, "\\\\").replace(/\n/g, "\\n")

/** A sample value: Go's float syntax for the infinities and NaN; bigint gauges and counters as integers. */
export const formatValue = (n: number | bigint): string =>
  typeof n === "bigint"
    ? n.toString()
    : Number.isNaN(n)
    ? "NaN"
    : n === Infinity
    ? "+Inf"
    : n === -Infinity
    ? "-Inf"
    : String(n)

type Labels = ReadonlyArray<readonly [string, string]>

const labelPairs = (labels: Labels): string => labels.map(([k, v]) => `${labelName(k)}="${escapeLabel(v)}"`).join(",")
const labelSet = (labels: Labels): string => (labels.length === 0 ? "" : `{${labelPairs(labels)}}`)

interface Family {
  readonly name: string
  readonly kind: Kind
  help: string | undefined
  /** each series' samples, by its label set (a series' own samples keep their order: buckets by `le`) */
  readonly series: Array<readonly [string, Array<string>]>
}

const kindOf = (state: unknown): Kind | undefined =>
  MetricState.isCounterState(state) || MetricState.isFrequencyState(state)
    ? "counter"
    : MetricState.isGaugeState(state)
    ? "gauge"
    : MetricState.isHistogramState(state)
    ? "histogram"
    : MetricState.isSummaryState(state)
    ? "summary"
    : undefined

const familyName = (name: string, kind: Kind) => {
  const safe = metricName(name)
  return kind === "counter" && !safe.endsWith("_total") ? `${safe}_total` : safe
}

/** The samples of one series (one metric key: a name and its tags). */
const samples = (name: string, labels: Labels, state: unknown): Array<string> => {
  // the series' own labels are escaped once, whatever the number of its samples (a histogram has one per bucket)
  const base = labelPairs(labels)
  const line = (suffix: string, extra: Labels, value: number | bigint) => {
    const all = extra.length === 0 ? base : base === "" ? labelPairs(extra) : `${base},${labelPairs(extra)}`
    return `${name}${suffix}${all === "" ? "" : `{${all}}`} ${formatValue(value)}`
  }
  if (MetricState.isCounterState(state)) return [line("", [], state.count)]
  if (MetricState.isGaugeState(state)) return [line("", [], state.value)]
  if (MetricState.isFrequencyState(state)) {
    return [...state.occurrences].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([word, n]) =>
      line("", [["key", word]], n)
    )
  }
  if (MetricState.isHistogramState(state)) {
    // Effect's buckets are cumulative already and end with the +Inf boundary; +Inf is written from the count
    const finite = state.buckets.filter(([le]) => Number.isFinite(le))
    return [
      ...finite.map(([le, n]) => line("_bucket", [["le", formatValue(le)]], n)),
      line("_bucket", [["le", "+Inf"]], state.count),
      line("_sum", [], state.sum),
      line("_count", [], state.count)
    ]
  }
  if (MetricState.isSummaryState(state)) {
    return [
      ...state.quantiles.flatMap(([q, value]) =>
        Option.isSome(value) ? [line("", [["quantile", formatValue(q)]], value.value)] : []
      ),
      line("_sum", [], state.sum),
      line("_count", [], state.count)
    ]
  }
  return []
}

/**
 * The exposition of `pairs`: one `# HELP` and `# TYPE` per family, its series after them, families sorted by
 * name (stable output, easy to diff). A name used by two kinds of metric keeps the kind seen first; the other
 * series are left out (Prometheus would refuse the whole scrape).
 */
export const encode = (pairs: ReadonlyArray<MetricPair.MetricPair.Untyped>): string => {
  const families = new Map<string, Family>()
  for (const pair of pairs) {
    const kind = kindOf(pair.metricState)
    if (kind === undefined) continue
    const name = familyName(pair.metricKey.name, kind)
    let family = families.get(name)
    if (family === undefined) {
      family = { name, kind, help: undefined, series: [] }
      families.set(name, family)
    } else if (family.kind !== kind) {
      continue
    }
    if (family.help === undefined) family.help = Option.getOrUndefined(pair.metricKey.description)
    const labels = pair.metricKey.tags.map((t) => [t.key, t.value] as const)
    family.series.push([labelSet(labels), samples(name, labels, pair.metricState)])
  }
  const out: Array<string> = []
  for (const family of [...families.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
    out.push(`# HELP ${family.name} ${escapeHelp(family.help ?? family.name)}`)
    out.push(`# TYPE ${family.name} ${family.kind}`)
    const series = family.series.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    for (const [, lines] of series) out.push(...lines)
  }
  return out.length === 0 ? "" : `${out.join("\n")}\n`
}
