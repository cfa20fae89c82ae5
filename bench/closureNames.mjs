// node --expose-gc bench/closureNames.mjs: what esbuild's `keepNames` (tsx compiles with it) costs per closure our
// code creates. With it, every function expression is wrapped in `__name(fn, "name")`, an Object.defineProperty of
// its `name`; without it (scripts/build.mjs), JavaScript names the function itself. 300,000 objects of three
// closures each, as an SSE transport or an Effect pipeline makes them; heap after a full GC and CPU, per closure.
const __name = (target, value) => Object.defineProperty(target, "name", { value, configurable: true })
const variants = {
  plain: (i) => ({ open: () => i, send: (x) => x + i, close: () => i }),
  keepNames: (i) => ({
    open: __name(() => i, "open"),
    send: __name((x) => x + i, "send"),
    close: __name(() => i, "close")
  })
}
const N = 300_000
const measure = (make) => {
  globalThis.gc()
  const before = process.memoryUsage().heapUsed
  const cpu = process.cpuUsage()
  const kept = []
  for (let i = 0; i < N; i++) kept.push(make(i))
  const used = process.cpuUsage(cpu)
  globalThis.gc()
  const bytes = (process.memoryUsage().heapUsed - before) / N / 3
  return { bytes, ns: (used.user + used.system) * 1000 / N / 3, kept: kept.length }
}
if (typeof globalThis.gc !== "function") {
  console.error("run with node --expose-gc")
  process.exit(2)
}
// alternately, 3 rounds each; medians
const rounds = { plain: [], keepNames: [] }
for (let r = 0; r < 3; r++) for (const name of ["plain", "keepNames"]) rounds[name].push(measure(variants[name]))
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]
for (const name of ["plain", "keepNames"]) {
  const bytes = median(rounds[name].map((m) => m.bytes))
  const ns = median(rounds[name].map((m) => m.ns))
  console.log(`${name.padEnd(10)} ${bytes.toFixed(0)} bytes and ${ns.toFixed(0)} ns of CPU per closure (median of 3)`)
}
