import { describe, expect, it } from "@effect/vitest"
import * as fs from "node:fs"

// The README's testing-kit example is a copy of a test of the suite: this keeps the two from drifting apart.
describe("README testing kit", () => {
  it("shows test/unit/example.test.ts exactly as it is in the suite", () => {
    const readme = fs.readFileSync("README.md", "utf8")
    const block = /<!-- example: test\/unit\/example\.test\.ts -->\n```ts\n([\s\S]*?)```\n/.exec(readme)
    expect(block, "the README's example block").not.toBeNull()
    expect(block![1]).toBe(fs.readFileSync("test/unit/example.test.ts", "utf8"))
  })
})
