// Loaded into the runner by bench:polling only (node --expose-gc --import ./bench/memoryProbe.mjs): on SIGUSR2,
// a full garbage collection, then process.memoryUsage() written to MEMORY_PROBE_FILE. Live heap after a full
// GC says what each task costs; RSS alone mostly says how lazily V8 collects.
import * as fs from "node:fs"

process.on("SIGUSR2", () => {
  globalThis.gc?.()
  fs.writeFileSync(process.env.MEMORY_PROBE_FILE, JSON.stringify(process.memoryUsage()))
})
