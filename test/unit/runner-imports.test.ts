import { describe, expect, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as path from "node:path"

const files = (dir: string): Array<string> =>
  fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? files(path.join(dir, e.name)) : e.name.endsWith(".ts") ? [path.join(dir, e.name)] : []
  )

describe("what a runner loads", () => {
  // The package's index loads every module of @effect/platform, HttpApiScalar among them: a 6.4 MB bundle held as a
  // string constant, and its module source beside it. Importing modules by path cut a runner's live heap after
  // start-up from 77 to 64 MiB (heap after a full GC, loading src/runners/Runner.ts).
  it("src imports @effect/platform's modules by path, never the package's index", () => {
    const offenders = files("src").filter((f) => /from "@effect\/platform"/.test(fs.readFileSync(f, "utf8")))
    expect(offenders).toEqual([])
  })
})
