/**
 * npm run drill -- <name>... | all | list: the failure drills of seed §19.17. Each injects its failure into a stage
 * of its own (a fresh database, the simulator, runner processes), checks the documented behaviour, measures RTO and
 * RPO, restores, and prints a report row; `all` runs every drill in turn and writes drills/report.md. Exits 1 if any
 * drill failed.
 *   DRILL_VERBOSE=1  the runners' and the simulator's output
 */
import * as fs from "node:fs"
import { callbackLoss } from "./callbackLoss.js"
import { mqOutage } from "./mqOutage.js"
import { objectStoreDown } from "./objectStoreDown.js"
import { pgFailover } from "./pgFailover.js"
import { pitr } from "./pitr.js"
import { providersDown } from "./providersDown.js"
import { redisFailover } from "./redisFailover.js"
import { regionTakeover } from "./regionTakeover.js"
import { crashedRow, type DrillRow, reportTable } from "./report.js"
import { runnerLoss } from "./runnerLoss.js"

const DRILLS: Record<string, () => Promise<DrillRow>> = {
  "runner-loss": runnerLoss,
  "redis-failover": redisFailover,
  "mq-outage": mqOutage,
  "callback-loss": callbackLoss,
  "providers-down": providersDown,
  "object-store-down": objectStoreDown,
  "region-takeover": regionTakeover,
  "pg-failover": pgFailover,
  pitr
}

const main = async () => {
  const args = process.argv.slice(2)
  if (args.length === 0 || args[0] === "list") {
    console.log(`drills: ${Object.keys(DRILLS).join(", ")}; or all`)
    return args.length === 0 ? 2 : 0
  }
  const names = args[0] === "all" ? Object.keys(DRILLS) : args
  const unknown = names.filter((n) => DRILLS[n] === undefined)
  if (unknown.length > 0) {
    console.error(`unknown drill: ${unknown.join(", ")} (drills: ${Object.keys(DRILLS).join(", ")})`)
    return 2
  }
  const rows: Array<DrillRow> = []
  for (const name of names) {
    console.log(`\n== drill ${name} ==`)
    const started = performance.now()
    const row = await DRILLS[name]!().catch((e) => crashedRow(name, e))
    rows.push(row)
    console.log(`${name}: ${row.passed ? "pass" : "FAIL"} in ${((performance.now() - started) / 1000).toFixed(0)} s`)
    console.log(reportTable([row]))
  }
  console.log(`\n${reportTable(rows)}`)
  if (args[0] === "all") {
    fs.writeFileSync(
      "drills/report.md",
      `# Drill report\n\n\`npm run drill -- all\`, ${new Date().toISOString()}, on ${
        (await import("node:os")).cpus().length
      } cores.\n\n${reportTable(rows)}\n`
    )
    console.log("written: drills/report.md")
  }
  return rows.every((r) => r.passed) ? 0 : 1
}

main().then((code) => process.exit(code), (e) => {
  console.error(e)
  process.exit(1)
})
