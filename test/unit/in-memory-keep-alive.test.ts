import { Entity, EntityAddress, EntityId, type Message, ShardId, Sharding, Snowflake } from "@effect/cluster"
import { EntityNotAssignedToRunner } from "@effect/cluster/ClusterError"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Option, Scope, TestClock } from "effect"
import { GenerationTask } from "../../src/entities/GenerationTask.js"
import { makeInMemoryKeepAlive } from "../../src/entities/inMemoryKeepAlive.js"
import { answerKeepAlive } from "../support/keepAlives.js"

const address = EntityAddress.make({
  entityType: GenerationTask.type,
  entityId: EntityId.make("task-1"),
  shardId: ShardId.make("default", 1)
})

/**
 * An entity's in-memory keep-alive (src/entities/inMemoryKeepAlive.ts) over a Sharding whose `send` is `send`: the
 * keep-alive as the entity manager would take it. Returns the keep-alive and the entity's latch.
 */
const keepAliveOver = (
  send: (message: Message.Incoming<any>) => Effect.Effect<void, EntityNotAssignedToRunner>,
  sends?: Scope.Scope
) =>
  Effect.gen(function*() {
    const latch = yield* Effect.makeLatch(false)
    const sharding = Sharding.Sharding.of({ getSnowflake: Effect.succeed(Snowflake.Snowflake(1n)), send } as never)
    const keepAlive = yield* makeInMemoryKeepAlive(sends ?? (yield* Effect.scope)).pipe(
      Effect.provideService(Sharding.Sharding, sharding),
      Effect.provideService(Entity.CurrentAddress, address),
      Effect.provideService(Entity.KeepAliveLatch, latch)
    )
    return { keepAlive, latch }
  })

/** Whether the latch lets a waiter through now. */
const isOpen = (latch: Effect.Latch) =>
  Effect.gen(function*() {
    const waiter = yield* Effect.fork(latch.await)
    yield* Effect.yieldNow()
    const through = Option.isSome(yield* Fiber.poll(waiter))
    yield* Fiber.interrupt(waiter)
    return through
  })

describe("an entity's keep-alive in memory", () => {
  it.scoped("open while the entity does not hold itself, closed while it does, open again once released", () =>
    Effect.gen(function*() {
      const { keepAlive, latch } = yield* keepAliveOver(() => Effect.void)
      // made closed by the library; opened at build, so that a stray keep-alive (an older entity's) is answered
      expect(yield* isOpen(latch)).toBe(true)
      expect(yield* keepAlive.hold).toBe(true)
      expect(yield* isOpen(latch)).toBe(false)
      yield* keepAlive.release
      expect(yield* isOpen(latch)).toBe(true)
    }))

  it.scoped("refused (the shard left): not held, the latch open again, and a later hold does not wait", () =>
    Effect.gen(function*() {
      let refuse = true
      const { keepAlive, latch } = yield* keepAliveOver((message) =>
        refuse
          ? Effect.fail(new EntityNotAssignedToRunner({ address: message.envelope.address }))
          : answerKeepAlive(message)
      )
      expect(yield* keepAlive.hold).toBe(false)
      expect(yield* isOpen(latch)).toBe(true)
      // the refused keep-alive is never answered by the entity manager: a hold after it must not wait for that answer
      refuse = false
      const later = yield* Effect.fork(Effect.timeoutOption(keepAlive.hold, "1 second"))
      yield* TestClock.adjust("1 second")
      expect(yield* Fiber.join(later)).toEqual(Option.some(true))
    }))

  it.scoped("a caller interrupted while the keep-alive is on its way does not cut its send (a build) in half", () =>
    Effect.gen(function*() {
      // the send builds the entity the keep-alive goes to: it takes a while
      const sending = yield* Deferred.make<void>()
      const building = yield* Deferred.make<void>()
      let built = false
      const { keepAlive } = yield* keepAliveOver((message) =>
        Effect.gen(function*() {
          yield* Deferred.succeed(sending, void 0)
          yield* Deferred.await(building)
          built = true
          yield* answerKeepAlive(message)
        })
      )
      const holding = yield* Effect.fork(keepAlive.hold)
      yield* Deferred.await(sending)
      // the entity that sent it stops (its lifecycle, this fiber, is interrupted) mid-send
      yield* Fiber.interrupt(holding)
      yield* Deferred.succeed(building, void 0)
      yield* Effect.yieldNow()
      expect(built).toBe(true)
    }))

  it.scoped("a keep-alive still on its way when the runner stops is ended with it", () =>
    Effect.gen(function*() {
      const sending = yield* Deferred.make<void>()
      let interrupted = false
      const runner = yield* Scope.make()
      const { keepAlive } = yield* keepAliveOver(
        () =>
          Deferred.succeed(sending, void 0).pipe(
            Effect.zipRight(Effect.never),
            Effect.onInterrupt(() => Effect.sync(() => (interrupted = true)))
          ),
        runner
      )
      const holding = yield* Effect.fork(keepAlive.hold)
      yield* Deferred.await(sending)
      yield* Scope.close(runner, Exit.void)
      // the lifecycle that sent it is interrupted too (its keep-alive never came): it parks or leaves the task
      const ended = yield* Effect.fork(Effect.timeoutOption(Fiber.await(holding), "1 second"))
      yield* TestClock.adjust("1 second")
      const exit = yield* Fiber.join(ended)
      expect(Option.isSome(exit) && Exit.isInterrupted(exit.value)).toBe(true)
      expect(interrupted).toBe(true)
    }))
})
