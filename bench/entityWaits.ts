/**
 * npm run bench:waits — what one sleeping task lifecycle costs in heap, by how it waits: 10,000 fibers each looping
 * on a 60 s wait, live heap after a full GC before and after, per fiber. The entity's wait (src/entities/changeSignal.ts)
 * is "a timer, no fiber"; it replaced "timeout(Queue.take)". The plain sleep is the floor.
 */
import { Deferred, Duration, Effect, Fiber, Queue } from "effect"
import { makeChangeSignal } from "../src/entities/changeSignal.js"

const N = Number(process.env.BENCH_FIBERS ?? 10_000)
const gc = (globalThis as { gc?: () => void }).gc
if (gc === undefined) throw new Error("run with node --expose-gc (npm run bench:waits does)")
const heap = () => {
  gc()
  return process.memoryUsage().heapUsed
}
const pause = (ms: number) => new Promise((r) => setTimeout(r, ms))

const measure = async (label: string, make: () => Effect.Effect<void>) => {
  const before = heap()
  const fibers = Array.from({ length: N }, () => Effect.runFork(make()))
  await pause(500)
  const perFiber = (heap() - before) / N / 1024
  for (const f of fibers) f.unsafeInterruptAsFork(f.id())
  await pause(500)
  console.log(`${label.padEnd(44)} ${perFiber.toFixed(2).padStart(6)} KiB per sleeping loop`)
}
const loop = (wait: Effect.Effect<void>) => Effect.forever(wait)

await measure("Effect.sleep (the floor)", () => loop(Effect.sleep(Duration.seconds(60))))
await measure("timeout(Queue.take) (the entity's old wait)", () =>
  Effect.flatMap(
    Queue.sliding<void>(1),
    (q) => loop(Effect.ignore(Effect.timeout(Queue.take(q), Duration.seconds(60))))
  ))
await measure("Deferred + a forked sleep", () =>
  loop(Effect.gen(function*() {
    const d = yield* Deferred.make<void>()
    const sleeper = yield* Effect.forkDaemon(
      Effect.zipRight(Effect.sleep("60 seconds"), Deferred.succeed(d, undefined))
    )
    yield* Effect.ensuring(Deferred.await(d), Fiber.interrupt(sleeper))
  })))
await measure("changeSignal.wait (the entity's wait now)", () => {
  const signal = makeChangeSignal()
  return loop(signal.wait(60_000))
})
process.exit(0)
