/**
 * node bench/profileSummary.mjs FILE.cpuprofile [TOP]: where a runner's CPU went, from a profile a bench wrote with
 * BENCH_NODE_ARGS="--cpu-prof --cpu-prof-dir=DIR". Self time by package (node_modules/<package>, the project's own
 * src/<folder>, Node's internals, GC, idle), then by function. Effect's fibers keep no JavaScript call stack across
 * their steps, so time inside Effect's runtime shows as effect's own, not under the code that asked for it.
 * PROFILE_LAST_MS=N counts only the profile's last N ms (e.g. a runner's shutdown: the profile ends at its exit), and
 * PROFILE_SKIP_LAST_MS=M leaves out its last M ms of those (one phase of a bench: the phases after it last M ms).
 */
import fs from "node:fs"

const [file, topArg] = process.argv.slice(2)
if (file === undefined) {
  console.error("usage: node bench/profileSummary.mjs FILE.cpuprofile [TOP]")
  process.exit(2)
}
const top = Number(topArg ?? 25)
const profile = JSON.parse(fs.readFileSync(file, "utf8"))
const nodes = new Map(profile.nodes.map((n) => [n.id, n]))
const selfMicros = new Map()
let total = 0
const lastMicros = process.env.PROFILE_LAST_MS === undefined ? Infinity : Number(process.env.PROFILE_LAST_MS) * 1000
const skipMicros = Number(process.env.PROFILE_SKIP_LAST_MS ?? 0) * 1000
let at = profile.startTime
profile.samples.forEach((id, i) => {
  const dt = profile.timeDeltas[i] ?? 0
  at += dt
  if (profile.endTime - at > lastMicros || profile.endTime - at < skipMicros) return
  selfMicros.set(id, (selfMicros.get(id) ?? 0) + dt)
  total += dt
})

const area = (url, name) => {
  if (!url) return name.startsWith("(") ? name : `(native) ${name}`
  const dep = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url)
  if (dep) return dep[1]
  const own = /\/(src|bench|test)\/([^/]+)/.exec(url)
  if (own) return `${own[1]}/${own[2]}`
  if (url.startsWith("node:")) return url.split("/").slice(0, 2).join("/")
  return url
}
const byArea = new Map()
const byFunction = new Map()
for (const [id, micros] of selfMicros) {
  const { url, functionName, lineNumber } = nodes.get(id).callFrame
  const a = area(url, functionName)
  byArea.set(a, (byArea.get(a) ?? 0) + micros)
  const f = `${functionName || "(anonymous)"}  ${a}:${lineNumber + 1}`
  byFunction.set(f, (byFunction.get(f) ?? 0) + micros)
}
const print = (m) =>
  [...m].sort((x, y) => y[1] - x[1]).slice(0, top).forEach(([k, v]) =>
    console.log(`${(100 * v / total).toFixed(1).padStart(6)}%  ${k}`)
  )
console.log(`${file}: ${(total / 1e6).toFixed(1)} s sampled`)
console.log("-- self time by package --")
print(byArea)
console.log("-- self time by function --")
print(byFunction)
