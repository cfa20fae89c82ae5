// node bench/heapSummary.mjs <after.heapsnapshot> [<before.heapsnapshot> [per]]: self size by object kind in a heap
// snapshot (bench:polling writes them with BENCH_HEAP_SNAPSHOTS), or what grew from `before` to `after`, divided by
// `per` (the number of tasks added, say) to show what one task costs. Sizes are V8's self sizes: what an object holds
// itself, not what it keeps alive.
import * as fs from "node:fs"

const kinds = (file) => {
  const snap = JSON.parse(fs.readFileSync(file, "utf8"))
  const fields = snap.snapshot.meta.node_fields
  const types = snap.snapshot.meta.node_types[0]
  const [stride, type, name, size] = [fields.length, fields.indexOf("type"), fields.indexOf("name"), fields.indexOf("self_size")]
  const found = new Map()
  for (let i = 0; i < snap.nodes.length; i += stride) {
    const t = types[snap.nodes[i + type]]
    const n = t.endsWith("string") ? "" : t === "code" ? "" : snap.strings[snap.nodes[i + name]].slice(0, 50)
    const key = `${t.padEnd(12)} ${n}`
    const k = found.get(key) ?? { bytes: 0, count: 0 }
    k.bytes += snap.nodes[i + size]
    k.count++
    found.set(key, k)
  }
  return found
}

const [afterFile, beforeFile, perArg] = process.argv.slice(2)
if (afterFile === undefined) {
  console.error("usage: node bench/heapSummary.mjs <after.heapsnapshot> [<before.heapsnapshot> [per]]")
  process.exit(2)
}
const after = kinds(afterFile)
const before = beforeFile === undefined ? new Map() : kinds(beforeFile)
const per = Number(perArg ?? 1)
const rows = [...new Set([...after.keys(), ...before.keys()])].map((key) => ({
  key,
  bytes: (after.get(key)?.bytes ?? 0) - (before.get(key)?.bytes ?? 0),
  count: (after.get(key)?.count ?? 0) - (before.get(key)?.count ?? 0)
}))
const total = rows.reduce((s, r) => s + r.bytes, 0)
const unit = per === 1 ? (b) => `${(b / 1048576).toFixed(2)} MiB` : (b) => `${(b / per / 1024).toFixed(2)} KiB`
console.log(`${beforeFile === undefined ? "total" : "grown"}${per === 1 ? "" : ` per ${per}`}: ${unit(total)}`)
for (const r of rows.sort((a, b) => b.bytes - a.bytes).slice(0, 40)) {
  console.log(`${unit(r.bytes).padStart(12)} ${(r.count / per).toFixed(per === 1 ? 0 : 1).padStart(9)}  ${r.key}`)
}
