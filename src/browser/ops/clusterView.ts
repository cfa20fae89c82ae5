import { act } from "./actions.js"
import { type ApiFailure, call, type ClusterStatus, encodeSegment, type RunnerView, type ShardMap } from "./api.js"
import { $, h, setText, syncRows } from "./dom.js"
import { assignColors, colorOf, renderShardMap } from "./shardMap.js"

/** Runners (health, weight, shards, drain) and the shard map: refreshed together, about every second. */

const runnerPath = (address: string, action: string) => `/admin/runners/${encodeSegment(address)}/${action}`

const runnerRow = (r: RunnerView): HTMLTableRowElement => {
  const drain = h("button", { class: "drain", type: "button" }, "Drain")
  const undrain = h("button", { class: "undrain", type: "button" }, "Undrain")
  const weight = h("input", { class: "weight-input", type: "number", min: "0", step: "1", "aria-label": "weight" })
  const setWeight = h("button", { class: "set-weight", type: "button" }, "Set")
  drain.onclick = () =>
    act(
      drain,
      () => call("POST", runnerPath(r.address, "drain")),
      () => `drain of ${r.address} requested: its shards move to the other runners`,
      `Drain ${r.address}? Its shards move to the other runners; it keeps serving HTTP.`
    )
  undrain.onclick = () =>
    act(undrain, () => call("POST", runnerPath(r.address, "undrain")), () => `${r.address} takes shards again`)
  setWeight.onclick = () => {
    const value = Number(weight.value)
    if (weight.value === "" || !Number.isInteger(value) || value < 0) {
      weight.focus()
      return
    }
    act(
      setWeight,
      () => call("PUT", runnerPath(r.address, "weight"), { weight: value }),
      () => `weight of ${r.address} set to ${value}`
    ).then((ok) => ok && (weight.value = ""))
  }
  return h(
    "tr",
    { "data-address": r.address },
    h("td", {}, h("i", { class: "swatch", style: `background:${colorOf(r.address)}` })),
    h("td", { class: "address mono" }, r.address),
    h("td", { class: "health" }),
    h("td", { class: "num shards" }),
    h("td", { class: "num entities" }),
    h("td", { class: "num weight" }),
    h("td", { class: "singletons" }),
    h("td", { class: "actions" }, drain, undrain, h("span", { class: "weight-control" }, weight, setWeight))
  )
}

const updateRunner = (row: HTMLTableRowElement, r: RunnerView) => {
  row.dataset.healthy = String(r.healthy)
  row.dataset.draining = String(r.draining)
  const health = row.querySelector<HTMLElement>(".health")!
  const state = !r.healthy ? "unhealthy" : r.draining ? "draining" : "healthy"
  if (health.dataset.state !== state) {
    health.dataset.state = state
    health.replaceChildren(h("span", { class: `badge ${state}` }, state))
  }
  setText(row, ".shards", String(r.shards))
  setText(row, ".entities", r.entities === null ? "–" : String(r.entities))
  setText(row, ".weight", String(r.weight))
  setText(row, ".singletons", r.singletons.length === 0 ? "–" : r.singletons.join(", "))
  row.querySelector<HTMLElement>(".singletons")!.title = r.singletons.join("\n")
  row.querySelector<HTMLButtonElement>(".drain")!.hidden = r.draining
  row.querySelector<HTMLButtonElement>(".undrain")!.hidden = !r.draining
  row.querySelector<HTMLInputElement>(".weight-input")!.placeholder = String(r.weight)
}

/** One refresh of the cluster views; the failures (each already a readable line) are returned to the page. */
export const refreshCluster = async (): Promise<ReadonlyArray<ApiFailure>> => {
  const [status, map] = await Promise.all([
    call<ClusterStatus>("GET", "/admin/cluster"),
    call<ShardMap>("GET", "/admin/shards")
  ])
  const failures: Array<ApiFailure> = []
  const runners = status.ok ? status.value.runners : []
  if (status.ok) {
    assignColors(runners.map((r) => r.address))
    const sorted = [...runners].sort((a, b) => a.address.localeCompare(b.address))
    syncRows($<HTMLTableSectionElement>("runners"), sorted, (r) => r.address, runnerRow, updateRunner)
    const healthy = runners.filter((r) => r.healthy).length
    setText(document, "#runners-summary", `${healthy} of ${runners.length} healthy`)
    setText(
      document,
      "#shards-summary",
      `${status.value.groups.length} group${status.value.groups.length === 1 ? "" : "s"} × ` +
        `${status.value.shards_per_group} shards`
    )
  } else failures.push(status.failure)
  if (map.ok) renderShardMap($("shard-groups"), $("legend"), map.value.shards, runners)
  else failures.push(map.failure)
  $("cluster").classList.toggle("stale", failures.length > 0)
  return failures
}
