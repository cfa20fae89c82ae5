import { RunnerAddress, RunnerStorage } from "@effect/cluster"
import * as ShardId from "@effect/cluster/ShardId"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, TestClock } from "effect"
import { withPromptAcquire } from "../../src/cluster/PromptAcquire.js"

const self = RunnerAddress.make("127.0.0.1", 34431)
const shards = [1, 2, 3, 4].map((id) => ShardId.make("default", id))

/** Lock storage where the given shards are held by a runner still releasing them, until `free()` is called. */
const storage = (held: ReadonlyArray<number>, ownAlready: ReadonlyArray<number> = []) => {
  const locked = new Set(held)
  const asked: Array<number> = []
  const inner = RunnerStorage.RunnerStorage.of({
    acquire: (_address: RunnerAddress.RunnerAddress, ids: Iterable<ShardId.ShardId>) =>
      Effect.sync(() => {
        const list: Array<ShardId.ShardId> = Array.from(ids)
        asked.push(list.length)
        // what the storage hands back is a new object per shard, as when decoded from the database
        // and, as SqlRunnerStorage does, every shard this runner held already (its lock connection's locks)
        return [
          ...ownAlready.map((id) => ShardId.make("default", id)),
          ...list.filter((s) => !locked.has(s.id)).map((s) => ShardId.make(s.group, s.id))
        ]
      })
  } as never)
  return { storage: withPromptAcquire(inner), asked, free: () => locked.clear() }
}

describe("acquisitions ask again promptly for shards still being released", () => {
  it.effect("all free: one call, as before", () =>
    Effect.gen(function*() {
      const s = storage([])
      expect((yield* s.storage.acquire(self, shards)).map((x) => x.id)).toEqual([1, 2, 3, 4])
      expect(s.asked).toEqual([4])
    }))

  it.effect("shards released a moment later are taken then, asking only for the rest", () =>
    Effect.gen(function*() {
      const s = storage([3, 4])
      const fiber = yield* Effect.fork(s.storage.acquire(self, shards))
      yield* TestClock.adjust("100 millis")
      s.free()
      yield* TestClock.adjust("25 millis")
      const got = yield* Fiber.join(fiber)
      expect(got.map((x) => x.id).sort()).toEqual([1, 2, 3, 4])
      expect(s.asked[0]).toBe(4)
      expect(s.asked.slice(1).every((n) => n === 2)).toBe(true)
    }))

  it.effect("shards that stay held: what was free is returned within a second, for the library's next try", () =>
    Effect.gen(function*() {
      const s = storage([2])
      const fiber = yield* Effect.fork(s.storage.acquire(self, shards))
      yield* TestClock.adjust("1 second")
      const got = yield* Fiber.join(fiber)
      expect(got.map((x) => x.id).sort()).toEqual([1, 3, 4])
    }))

  it.effect("the shards this runner held already, answered with the new ones, do not count for those asked for", () =>
    Effect.gen(function*() {
      // a survivor holding 5 and 6 asks for 1–4 while 3 and 4 are still being released: 4 shards come back at first
      const s = storage([3, 4], [5, 6])
      const fiber = yield* Effect.fork(s.storage.acquire(self, shards))
      yield* TestClock.adjust("100 millis")
      s.free()
      yield* TestClock.adjust("25 millis")
      const got = yield* Fiber.join(fiber)
      expect(got.map((x) => x.id).sort()).toEqual([1, 2, 3, 4, 5, 6])
      expect(s.asked.length).toBeGreaterThan(1)
    }))
})
