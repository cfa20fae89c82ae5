/** A drill's result: one row of the report (`npm run drill -- all` writes drills/report.md). */
export interface DrillRow {
  readonly drill: string
  /** What was broken, and how. */
  readonly fault: string
  /** The documented behaviour the drill checked, in a few words. */
  readonly behaviour: string
  /** Recovery time: the fault (or its end, said in `rtoMeasures`) → service restored, in seconds. */
  readonly rtoS: number
  readonly rtoMeasures: string
  /** Acknowledged work lost: commits, tasks or callbacks, with the unit. */
  readonly rpo: string
  /** The invariants after recovery, and anything else measured. */
  readonly figures: string
  /** Steps an operator had to take (the drill takes them through the ops surface). */
  readonly manualSteps: string
  readonly passed: boolean
  readonly problems: ReadonlyArray<string>
}

const cell = (s: string) => s.replace(/\|/g, "\\|").replace(/\n/g, " ")

export const reportTable = (rows: ReadonlyArray<DrillRow>) =>
  [
    "| drill | fault | behaviour checked | RTO | RPO | figures | manual steps | result |",
    "|---|---|---|---|---|---|---|---|",
    ...rows.map((r) =>
      `| ${r.drill} | ${cell(r.fault)} | ${cell(r.behaviour)} | ${r.rtoS.toFixed(1)} s (${cell(r.rtoMeasures)}) | ${
        cell(r.rpo)
      } | ${cell(r.figures)} | ${cell(r.manualSteps)} | ${
        r.passed ? "pass" : `**FAIL**: ${cell(r.problems.join("; "))}`
      } |`
    )
  ].join("\n")

/** The row of a drill that threw before it could measure. */
export const crashedRow = (drill: string, error: unknown): DrillRow => ({
  drill,
  fault: "-",
  behaviour: "-",
  rtoS: NaN,
  rtoMeasures: "-",
  rpo: "-",
  figures: "-",
  manualSteps: "-",
  passed: false,
  problems: [error instanceof Error ? error.message : String(error)]
})
