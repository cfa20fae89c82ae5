import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Option, Scope } from "effect"
import { makeAckBehind } from "../../src/queue/RocketMQAck.js"

/** Lets every other fiber that can run, run. */
const settle = Effect.repeatN(Effect.yieldNow(), 20)

describe("a round's ack goes out behind its receiver (RocketMQ consumer)", () => {
  it.effect("answers while the ack is out, keeps at most `limit` out, and a closing scope waits for them", () =>
    Effect.gen(function*() {
      const gate = yield* Deferred.make<void>()
      const done: Array<number> = []
      const ackBehind = yield* makeAckBehind<number>(
        2,
        (ms) => Effect.zipRight(Deferred.await(gate), Effect.sync(() => done.push(ms[0]!)))
      )
      const scope = yield* Scope.make()

      // two acks out: each call answers at once, neither ack done
      yield* Scope.extend(ackBehind([1]), scope)
      yield* Scope.extend(ackBehind([2]), scope)
      expect(done).toEqual([])
      // a third waits for one of them
      const third = yield* Effect.fork(Scope.extend(ackBehind([3]), scope))
      yield* settle
      expect(Option.isNone(yield* Fiber.poll(third))).toBe(true)
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(third)

      // an ack still out when the scope closes is waited for, not interrupted
      const slow = yield* Deferred.make<void>()
      const late = yield* makeAckBehind<number>(
        2,
        (ms) => Effect.zipRight(Deferred.await(slow), Effect.sync(() => done.push(ms[0]!)))
      )
      yield* Scope.extend(late([4]), scope)
      const closing = yield* Effect.fork(Scope.close(scope, Exit.void))
      yield* settle
      expect(Option.isNone(yield* Fiber.poll(closing))).toBe(true)
      expect(done).not.toContain(4)
      yield* Deferred.succeed(slow, undefined)
      yield* Fiber.join(closing)
      expect([...done].sort()).toEqual([1, 2, 3, 4])
    }))
})
