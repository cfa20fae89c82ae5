/**
 * node bench/profileStretches.mjs FILE.cpuprofile [MIN_MS] [TOP]: the event loop's busy stretches in a profile a bench
 * wrote with BENCH_NODE_ARGS="--cpu-prof --cpu-prof-dir=DIR": every run of consecutive non-idle samples of at least
 * MIN_MS (default 15), with when it began (seconds into the profile), how long it lasted, and the TOP (default 8)
 * frames most of its samples ran under (a frame counted once per sample, so a share is "under this frame"). A stall
 * that repeats shows as stretches at a steady period: the SSE heartbeat's (230 ms every 15 s at 5,000 streams, stop 58)
 * and the gateway tail's (stop 57) were found this way; profileSummary.mjs sums them away with everything else.
 * PROFILE_ONLY=REGEX keeps only the frames whose "function url:line" matches (e.g. 'src/|pg/|writev|garbage': the
 * runtime's own frames, effect's and node's, otherwise fill the list).
 */
import fs from "node:fs"

const [file, minArg, topArg] = process.argv.slice(2)
if (file === undefined) {
  console.error("usage: node bench/profileStretches.mjs FILE.cpuprofile [MIN_MS] [TOP]")
  process.exit(2)
}
const minMs = Number(minArg ?? 15)
const top = Number(topArg ?? 8)
const only = process.env.PROFILE_ONLY === undefined ? null : new RegExp(process.env.PROFILE_ONLY)
const profile = JSON.parse(fs.readFileSync(file, "utf8"))
const nodes = new Map(profile.nodes.map((n) => [n.id, n]))
const parent = new Map()
for (const n of profile.nodes) for (const child of n.children ?? []) parent.set(child, n.id)
// lines 1-based, as profileSummary.mjs prints them (the profile's are 0-based)
const frame = (n) =>
  `${n.callFrame.functionName || "(anonymous)"} ${
    n.callFrame.url.replace(/.*node_modules\//, "").replace(/.*\/src\//, "src/")
  }:${n.callFrame.lineNumber + 1}`
const isIdle = (id) => nodes.get(id).callFrame.functionName === "(idle)"

const stretches = []
let current = null
let at = profile.startTime
profile.samples.forEach((id, i) => {
  at += profile.timeDeltas[i] ?? 0
  if (isIdle(id)) {
    if (current !== null) stretches.push(current)
    current = null
    return
  }
  current ??= { start: at, end: at, samples: [] }
  current.end = at
  current.samples.push(id)
})
if (current !== null) stretches.push(current)

const long = stretches.filter((s) => (s.end - s.start) / 1000 >= minMs)
console.log(
  `${long.length} busy stretches of ${minMs} ms or more in ${((at - profile.startTime) / 1e6).toFixed(1)} s`
)
for (const s of long) {
  const under = new Map()
  for (const id of s.samples) {
    const seen = new Set()
    for (let n = id; n !== undefined; n = parent.get(n)) {
      const name = frame(nodes.get(n))
      if (seen.has(name)) continue
      seen.add(name)
      under.set(name, (under.get(name) ?? 0) + 1)
    }
  }
  const frames = [...under]
    .filter(([name]) => !name.startsWith("(root)") && (only === null || only.test(name)))
    .sort((a, b) => b[1] - a[1])
    .slice(0, top)
    .map(([name, count]) => `${name} ${Math.round((100 * count) / s.samples.length)}%`)
  const begin = ((s.start - profile.startTime) / 1e6).toFixed(2)
  console.log(`@${begin} s, ${((s.end - s.start) / 1000).toFixed(1)} ms: ${frames.join(" | ")}`)
}
