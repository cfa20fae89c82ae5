import { Array as Arr, Metric, MetricLabel } from "effect"

/**
 * A metric's series by label values, each made once. `Metric.tagged` builds a new key (hashed, then looked up in the
 * registry) on every update: it adds its labels with `Array.union`, a new array each time, and the metric's cache of
 * registry entries is keyed by that array. On a hot path (a webhook, an observation) that cost more than the update
 * itself. A series here passes the same label array on every update, so its registry entry is found once. The values
 * must come from small fixed sets, as every label here does (a provider, a source, an outcome).
 */
export const seriesBy = <Type, In, Out>(metric: Metric.Metric<Type, In, Out>, ...labels: ReadonlyArray<string>) => {
  const made = new Map<string, Metric.Metric<Type, In, Out>>()
  return (...values: ReadonlyArray<string>): Metric.Metric<Type, In, Out> => {
    const key = values.join("\u0000")
    let series = made.get(key)
    if (series === undefined) {
      series = withFixedLabels(metric, labels.map((label, i) => MetricLabel.make(label, values[i] ?? "")))
      made.set(key, series)
    }
    return series
  }
}

/** `metric` with fixed labels, for a series named once (a module's constant): as `Metric.tagged`, but cached. */
export const labelled = <Type, In, Out>(
  metric: Metric.Metric<Type, In, Out>,
  labels: Readonly<Record<string, string>>
) => withFixedLabels(metric, Object.entries(labels).map(([label, value]) => MetricLabel.make(label, value)))

const withFixedLabels = <Type, In, Out>(
  metric: Metric.Metric<Type, In, Out>,
  fixed: ReadonlyArray<MetricLabel.MetricLabel>
): Metric.Metric<Type, In, Out> => {
  // the fiber's own labels (Metric.increment passes them; none here) are added as Metric.tagged adds them
  const labelsWith = (extra: ReadonlyArray<MetricLabel.MetricLabel>) =>
    extra.length === 0 ? fixed : Arr.union(fixed, extra)
  return Metric.make(
    metric.keyType,
    (input: In, extra) => metric.unsafeUpdate(input, labelsWith(extra)),
    (extra) => metric.unsafeValue(labelsWith(extra)),
    (input: In, extra) => metric.unsafeModify(input, labelsWith(extra))
  )
}
