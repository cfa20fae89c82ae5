import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { AttemptSchedule } from "../../src/persistence/AttemptSchedule.js"
import { MigrationsLive } from "../../src/persistence/Database.js"
import type { AttemptId } from "../../src/schema/ids.js"
import { layerTestDatabase, noDatabase } from "../support/database.js"
import { scaled } from "../support/env.js"
import { uuid } from "../support/tasks.js"

describe.skipIf(noDatabase)("submission slots (SUBMIT_CONCURRENCY per provider, model and tenant)", () => {
  it.layer(AttemptSchedule.Default.pipe(Layer.provide(MigrationsLive.pipe(Layer.provideMerge(layerTestDatabase())))), {
    timeout: scaled(60_000)
  })((it) => {
    it.effect("60 attempts of one scope at once get exactly the limit; another scope is not held back", () =>
      Effect.gen(function*() {
        const schedule = yield* AttemptSchedule
        const scope = `runway/gen4.5/${uuid()}`
        const attempts = Array.from({ length: 60 }, () => uuid() as AttemptId)
        const held = yield* Effect.forEach(attempts, (a) => schedule.acquireSlot(scope, a, 7), {
          concurrency: "unbounded"
        })
        expect(held.filter((h) => h).length).toBe(7)
        // the scope is full; another scope has its own limit
        expect(yield* schedule.acquireSlot(scope, uuid() as AttemptId, 7)).toBe(false)
        expect(yield* schedule.acquireSlot(`runway/gen4.5/${uuid()}`, uuid() as AttemptId, 7)).toBe(true)
      }))

    it.effect("an attempt holding a slot keeps it when it asks again, even with the scope full", () =>
      Effect.gen(function*() {
        const schedule = yield* AttemptSchedule
        const scope = `fal/veo3/${uuid()}`
        const first = uuid() as AttemptId
        expect(yield* schedule.acquireSlot(scope, first, 1)).toBe(true)
        expect(yield* schedule.acquireSlot(scope, uuid() as AttemptId, 1)).toBe(false)
        expect(yield* schedule.acquireSlot(scope, first, 1)).toBe(true)
      }))
  })
})
