import { describe, expect, it } from "@effect/vitest"
import * as fs from "node:fs"
import { modesTable } from "../../src/domain/systemModes.js"

describe("the README's modes table", () => {
  it("is the table in src/domain/systemModes.ts", () => {
    const readme = fs.readFileSync(new URL("../../README.md", import.meta.url), "utf8")
    const copy = /<!-- modes:start -->\n([\s\S]*?)\n<!-- modes:end -->/.exec(readme)?.[1]
    expect(copy).toBe(modesTable())
  })
})
