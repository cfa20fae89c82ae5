import { Metric } from "effect"

/**
 * A metric's series by label values, each made once. `Metric.tagged` builds a new key (hashed, then looked up in the
 * registry) on every call: on a hot path (a webhook, an observation) that cost more than the update itself. The
 * values must come from small fixed sets, as every label here does (a provider, a source, an outcome).
 */
export const seriesBy = <Type, In, Out>(metric: Metric.Metric<Type, In, Out>, ...labels: ReadonlyArray<string>) => {
  const made = new Map<string, Metric.Metric<Type, In, Out>>()
  return (...values: ReadonlyArray<string>): Metric.Metric<Type, In, Out> => {
    const key = values.join("\u0000")
    let series = made.get(key)
    if (series === undefined) {
      series = labels.reduce((m, label, i) => Metric.tagged(m, label, values[i] ?? ""), metric)
      made.set(key, series)
    }
    return series
  }
}
