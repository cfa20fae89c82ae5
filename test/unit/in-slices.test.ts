import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { inSlices } from "../../src/http/inSlices.js"

describe("inSlices", () => {
  it.effect("gives the event loop a turn between slices, and reads its collection again on every run", () =>
    Effect.gen(function*() {
      const items = new Set(Array.from({ length: 1_200 }, (_, i) => i))
      const seen: Array<number | "turn"> = []
      const visit = (i: number) => {
        // I/O that became due while the first slice ran (a stream's event, a lock refresh)
        if (i === 0) setImmediate(() => seen.push("turn"))
        // an item gone before its slice came is still offered: f checks (the transports do)
        if (i === 10) items.delete(700)
        seen.push(i)
      }
      yield* inSlices(items, visit, 500)
      // the event loop ran after the first slice, not after all of them
      expect(seen.indexOf("turn")).toBe(500)
      expect(seen.filter((s) => s !== "turn")).toEqual(Array.from({ length: 1_200 }, (_, i) => i))
      // a second run (the next heartbeat) sees the collection as it is now
      seen.length = 0
      yield* inSlices(items, visit, 500)
      expect(seen.filter((s) => s !== "turn")).toHaveLength(1_199)
    }))
})
