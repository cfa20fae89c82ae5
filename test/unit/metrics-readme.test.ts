import { describe, expect, it } from "@effect/vitest"
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"

/** Every metric name defined in src/ (`Metric.counter("name"`, gauge, histogram …), as Prometheus shows it. */
const definedMetrics = () => {
  const files = execFileSync("git", ["ls-files", "src"], { encoding: "utf8" }).split("\n").filter((f) =>
    f.endsWith(".ts")
  )
  const names = new Set<string>()
  for (const file of files) {
    const text = fs.readFileSync(file, "utf8")
    for (const m of text.matchAll(/Metric\.(counter|gauge|histogram|summary|frequency)\(\s*"([a-z_:][a-z0-9_:]*)"/g)) {
      const [, kind, name] = m
      names.add(kind === "counter" || kind === "frequency" ? name!.replace(/(_total)?$/, "_total") : name!)
    }
  }
  return [...names].sort()
}

// The README's Metrics table is written by hand: this keeps it from missing a series the code defines.
describe("README metrics table", () => {
  it("lists every metric defined in src/, under the name /metrics gives it", () => {
    const readme = fs.readFileSync("README.md", "utf8")
    const section = readme.slice(readme.indexOf("## Metrics"), readme.indexOf("## Settings"))
    const defined = definedMetrics()
    expect(defined.length).toBeGreaterThan(30)
    expect(defined.filter((name) => !section.includes(`\`${name}\``))).toEqual([])
  })
})
