import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Scope } from "effect"
import { makeGroupCommit } from "../../src/persistence/GroupCommit.js"

// The batching itself, with no database: what goes together, and that every caller hears of its own item's fate
describe("group commit queue", () => {
  it.scoped("what is queued in one turn goes as one batch; each caller gets its own result", () =>
    Effect.gen(function*() {
      const batches: Array<ReadonlyArray<number>> = []
      const commit = yield* makeGroupCommit({
        name: "test",
        parallelism: 1,
        maxBatch: 100,
        run: (items: ReadonlyArray<number>) => Effect.sync(() => (batches.push(items), items.map((n) => n * 10)))
      })
      const results = yield* Effect.all(Array.from({ length: 5 }, (_, i) => commit(i)), { concurrency: "unbounded" })
      expect(results).toEqual([0, 10, 20, 30, 40])
      expect(batches.flat().sort()).toEqual([0, 1, 2, 3, 4])
      expect(batches.length).toBeLessThan(5)
    }))

  it.scoped("moreWhenQueued: while a batch runs, the next starts only once that many wait, then takes them all", () =>
    Effect.gen(function*() {
      const batches: Array<ReadonlyArray<number>> = []
      const release: Array<Deferred.Deferred<void>> = []
      const commit = yield* makeGroupCommit({
        name: "test",
        parallelism: 4,
        maxBatch: 100,
        moreWhenQueued: 3,
        run: (items: ReadonlyArray<number>) =>
          Effect.gen(function*() {
            const gate = yield* Deferred.make<void>()
            batches.push(items)
            release.push(gate)
            yield* Deferred.await(gate)
            return items
          })
      })
      const first = yield* Effect.fork(commit(0))
      yield* Effect.yieldNow().pipe(Effect.repeat({ until: () => batches.length === 1 }))
      // two wait: under the threshold, no second batch while the first runs
      const waiting = yield* Effect.forkAll([1, 2].map((n) => commit(n)))
      yield* Effect.yieldNow().pipe(Effect.repeat({ times: 20 }))
      expect(batches).toEqual([[0]])
      // a third makes three waiting: they go together, beside the first
      const third = yield* Effect.fork(commit(3))
      yield* Effect.yieldNow().pipe(Effect.repeat({ until: () => batches.length === 2 }))
      expect(batches).toEqual([[0], [1, 2, 3]])
      // one more waits; the first batch ending does not let it go while the second still runs (one is not three)
      const fourth = yield* Effect.fork(commit(4))
      yield* Deferred.succeed(release[0]!, undefined)
      expect(yield* Fiber.join(first)).toBe(0)
      yield* Effect.yieldNow().pipe(Effect.repeat({ times: 20 }))
      expect(batches.length).toBe(2)
      // every batch ended: what waits goes, however little
      yield* Deferred.succeed(release[1]!, undefined)
      expect(yield* Fiber.join(waiting)).toEqual([1, 2])
      expect(yield* Fiber.join(third)).toBe(3)
      yield* Effect.yieldNow().pipe(Effect.repeat({ until: () => batches.length === 3 }))
      expect(batches[2]).toEqual([4])
      yield* Deferred.succeed(release[2]!, undefined)
      expect(yield* Fiber.join(fourth)).toBe(4)
    }))

  it.scoped("a batch's failure, or a throw while it is built, reaches its callers and no one else's", () =>
    Effect.gen(function*() {
      const commit = yield* makeGroupCommit({
        name: "test",
        parallelism: 1,
        maxBatch: 1,
        run: (items: ReadonlyArray<number>) => {
          if (items[0] === 2) throw new Error("boom")
          return items[0] === 1 ? Effect.fail("refused" as const) : Effect.succeed(items)
        }
      })
      const exits = yield* Effect.all([0, 1, 2, 3].map((n) => Effect.exit(commit(n))), { concurrency: "unbounded" })
      expect(exits[0]).toEqual(Exit.succeed(0))
      expect(exits[1]).toEqual(Exit.fail("refused"))
      expect(Exit.isFailure(exits[2]!) && Exit.causeOption(exits[2]!)).toBeTruthy()
      expect(exits[3]).toEqual(Exit.succeed(3))
      // a result missing for an item is a defect for that item, not a hang
      const short = yield* makeGroupCommit({
        name: "test",
        parallelism: 1,
        maxBatch: 10,
        run: () => Effect.succeed([] as Array<number>)
      })
      expect(Exit.isFailure(yield* Effect.exit(short(1)))).toBe(true)
    }))

  it.scoped("offer (no fiber): every caller of a batch hears its result, even past a callback that throws", () =>
    Effect.gen(function*() {
      const commit = yield* makeGroupCommit({
        name: "test",
        parallelism: 1,
        maxBatch: 10,
        run: (items: ReadonlyArray<number>) => Effect.succeed(items.map((n) => n * 10))
      })
      const heard = yield* Effect.async<Array<number>>((resume) => {
        const got: Array<number> = []
        const done = (exit: Exit.Exit<number>) => {
          if (Exit.isSuccess(exit)) got.push(exit.value)
          if (got.length === 3) resume(Effect.succeed(got))
        }
        commit.offer(1, done)
        commit.offer(2, (exit) => {
          done(exit)
          throw new Error("a caller's bug")
        })
        commit.offer(3, done)
      })
      expect(heard.sort()).toEqual([10, 20, 30])
      // and the queue goes on
      expect(yield* commit(4)).toBe(40)
    }))

  it.effect("on shutdown, a running batch and the queued entries end interrupted, and so does a later one", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const started = yield* Deferred.make<void>()
      const commit = yield* makeGroupCommit({
        name: "test",
        parallelism: 1,
        maxBatch: 1,
        run: (items: ReadonlyArray<number>) =>
          Effect.zipRight(Deferred.succeed(started, undefined), Effect.never)
            .pipe(Effect.as(items))
      }).pipe(Scope.extend(scope))
      const running = yield* Effect.fork(commit(1))
      yield* Deferred.await(started)
      const queued = yield* Effect.fork(commit(2))
      yield* Effect.yieldNow() // its item is queued behind the running batch
      yield* Scope.close(scope, Exit.void)
      const heard: Array<Exit.Exit<number, never>> = [yield* Fiber.await(running), yield* Fiber.await(queued)]
      expect(heard).toHaveLength(2)
      expect(heard.every((e) => Exit.isInterrupted(e))).toBe(true)
      heard.push(yield* Effect.exit(commit(3)))
      expect(heard).toHaveLength(3)
      expect(Exit.isInterrupted(heard[2]!)).toBe(true)
    }))
})
