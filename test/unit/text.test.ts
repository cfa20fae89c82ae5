import { describe, expect, it } from "@effect/vitest"
import * as fc from "fast-check"
import { unstorable } from "../../src/schema/text.js"

/** Any UTF-16 code units, weighted towards the ones that matter here: NUL and surrogates of either half. */
const codeUnit = fc.oneof(
  fc.integer({ min: 0, max: 0xffff }),
  fc.constantFrom(0, 0xd800, 0xdbff, 0xdc00, 0xdfff, 0x41)
).map((u) => String.fromCharCode(u))
const text = fc.array(codeUnit, { maxLength: 12 }).map((units) => units.join(""))

describe("text PostgreSQL can store", () => {
  it.prop(
    "refused exactly when it holds a NUL or does not survive UTF-8 (a lone surrogate)",
    [text],
    ([s]) => {
      const survivesUtf8 = Buffer.from(s, "utf8").toString("utf8") === s
      expect(unstorable(s) === undefined).toBe(survivesUtf8 && !s.includes("\u0000"))
    }
  )

  it("names the problem", () => {
    expect(unstorable("a\u0000b")).toContain("NUL")
    expect(unstorable("a\ud800b")).toContain("surrogate")
    expect(unstorable("\udc00")).toContain("surrogate")
    expect(unstorable("a wave \ud83c\udf0a")).toBeUndefined()
  })
})
