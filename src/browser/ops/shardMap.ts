import type { RunnerView, ShardView } from "./api.js"
import { h } from "./dom.js"

/**
 * The shard map as a picture: one small square per shard, per group, colored by the runner that holds it, and a
 * legend. Squares are made once and only recolored on each refresh, so a drain shows as colors flowing from one
 * runner to the other (a few hundred squares per group: one attribute write each, no layout change).
 */

/** Colors told apart with the common color-vision deficiencies first (Okabe–Ito), then more for large clusters. */
const PALETTE = [
  "#0072b2",
  "#e69f00",
  "#009e73",
  "#cc79a7",
  "#56b4e9",
  "#d55e00",
  "#6a3d9a",
  "#b8a000",
  "#1b9e77",
  "#7f7f7f"
]

/** A runner keeps its color for as long as the page is open, even when others come and go. */
const colors = new Map<string, string>()

export const colorOf = (address: string): string => {
  let color = colors.get(address)
  if (color === undefined) {
    color = PALETTE[colors.size % PALETTE.length]!
    colors.set(address, color)
  }
  return color
}

/** Colors are handed out in address order the first time runners are seen, so two tabs agree on them. */
export const assignColors = (addresses: ReadonlyArray<string>) => [...addresses].sort().forEach(colorOf)

const squares = new Map<string, HTMLElement>()
let layout = ""

const keyOf = (s: ShardView) => `${s.group}/${s.id}`

/** Builds the squares when the set of shards changed (first load, another SHARDS_PER_GROUP), else reuses them. */
const ensureSquares = (container: HTMLElement, shards: ReadonlyArray<ShardView>) => {
  const sorted = [...shards].sort((a, b) => a.group.localeCompare(b.group) || a.id - b.id)
  const wanted = sorted.map(keyOf).join(",")
  if (wanted === layout) return
  layout = wanted
  squares.clear()
  const groups = new Map<string, Array<ShardView>>()
  for (const s of sorted) groups.set(s.group, [...(groups.get(s.group) ?? []), s])
  container.replaceChildren(
    ...[...groups].map(([group, members]) => {
      const grid = h("div", { class: "grid", role: "img", "aria-label": `shards of group ${group}` })
      for (const s of members) {
        const square = h("i", { class: "shard", "data-group": s.group, "data-id": String(s.id) })
        squares.set(keyOf(s), square)
        grid.append(square)
      }
      return h(
        "div",
        { class: "group", "data-group": group },
        h("div", { class: "group-name" }, group, " ", h("small", {}, `${members.length} shards`)),
        grid
      )
    })
  )
}

export const renderShardMap = (
  container: HTMLElement,
  legend: HTMLElement,
  shards: ReadonlyArray<ShardView>,
  runners: ReadonlyArray<RunnerView>
) => {
  ensureSquares(container, shards)
  const counts = new Map<string | null, number>()
  for (const s of shards) {
    counts.set(s.runner, (counts.get(s.runner) ?? 0) + 1)
    const square = squares.get(keyOf(s))!
    const runner = s.runner ?? ""
    if (square.dataset.runner !== runner) {
      square.dataset.runner = runner
      square.style.background = s.runner === null ? "" : colorOf(s.runner)
      square.title = `${s.group} #${s.id} → ${s.runner ?? "unassigned"}`
    }
  }
  const known = new Map(runners.map((r) => [r.address, r]))
  const holders = [...new Set([...runners.map((r) => r.address), ...shards.flatMap((s) => s.runner ?? [])])].sort()
  const unassigned = counts.get(null) ?? 0
  legend.replaceChildren(
    ...holders.map((address) => {
      const r = known.get(address)
      const notes = r === undefined ? ["not in the runner list"] : [
        ...(r.draining ? ["draining"] : []),
        ...(r.healthy ? [] : ["unhealthy"])
      ]
      return h(
        "span",
        { class: "legend-item", "data-runner": address, "data-shards": String(counts.get(address) ?? 0) },
        h("i", { class: "swatch", style: `background:${colorOf(address)}` }),
        h("code", {}, address),
        ` ${counts.get(address) ?? 0}`,
        notes.length === 0 ? null : h("em", {}, ` ${notes.join(", ")}`)
      )
    }),
    ...(unassigned === 0 ? [] : [
      h(
        "span",
        { class: "legend-item", "data-runner": "", "data-shards": String(unassigned) },
        h("i", { class: "swatch unassigned" }),
        `unassigned ${unassigned}`
      )
    ])
  )
}
