// Loaded into the runner by bench:polling only (node --expose-gc --import ./bench/memoryProbe.mjs): on SIGUSR2,
// a full garbage collection, then process.memoryUsage() written to MEMORY_PROBE_FILE. Live heap after a full
// GC says what each task costs; RSS alone mostly says how lazily V8 collects. With MEMORY_PROBE_SNAPSHOTS (a folder),
// a heap snapshot is written there first (tens of seconds; bench/heapSummary.mjs reads it, or two of them).
import * as fs from "node:fs"
import * as path from "node:path"
import * as v8 from "node:v8"

let taken = 0
process.on("SIGUSR2", () => {
  globalThis.gc?.()
  const dir = process.env.MEMORY_PROBE_SNAPSHOTS
  if (dir !== undefined && dir !== "") v8.writeHeapSnapshot(path.join(dir, `runner-${process.pid}-${++taken}.heapsnapshot`))
  fs.writeFileSync(process.env.MEMORY_PROBE_FILE, JSON.stringify(process.memoryUsage()))
})
