import { type Clock, Deferred, Duration, Effect, Fiber } from "effect"
import { isWallClock, timerMs } from "../runtime/timers.js"

/**
 * A task entity's "the task changed" flag, and its lifecycle's wait for it: a wait ends at a change or after `ms`,
 * whichever comes first; a change with nobody waiting is kept for the next wait or `take`. One waiter at a time (the
 * lifecycle fiber). On the live clock a wait is one timer and no fiber: it replaced `Effect.timeout(Queue.take(q))`,
 * which races two forked fibers per wait. `npm run bench:waits` (10,000 sleeping loops, heap after a full GC): 16.1
 * KiB each with the timeout and a sliding queue, 4.8 KiB with this (a bare sleep: 4.5). On another Clock (the
 * TestClock) the timer is a forked sleep of that clock (11.3 KiB), so tests move the entity's time as they move
 * everything else.
 */
export const makeChangeSignal = () => {
  let pending = false
  let waiter: (() => void) | null = null

  const onWallClock = (ms: number) =>
    Effect.async<void>((resume) => {
      const done = () => {
        clearTimeout(timer)
        waiter = null
        resume(Effect.void)
      }
      const timer = setTimeout(done, ms)
      waiter = done
      return Effect.sync(() => {
        clearTimeout(timer)
        if (waiter === done) waiter = null
      })
    })

  const onClock = (clock: Clock.Clock, ms: number) =>
    Effect.gen(function*() {
      const woken = yield* Deferred.make<void>()
      const done = () => {
        waiter = null
        Deferred.unsafeDone(woken, Effect.void)
      }
      waiter = done
      const sleeper = yield* Effect.forkDaemon(Effect.zipRight(clock.sleep(Duration.millis(ms)), Effect.sync(done)))
      yield* Effect.ensuring(
        Deferred.await(woken),
        Effect.zipRight(
          Fiber.interrupt(sleeper),
          Effect.sync(() => {
            if (waiter === done) waiter = null
          })
        )
      )
    })

  return {
    /** The task changed: ends the wait under way, or is kept for the next one. */
    notify: () => {
      if (waiter !== null) waiter()
      else pending = true
    },
    /** Takes a kept change: true if there was one. */
    take: () => {
      const was = pending
      pending = false
      return was
    },
    /** Waits up to `ms`, or less when the task changes (at once if a change is kept). */
    wait: (ms: number) =>
      Effect.suspend(() => {
        if (pending) {
          pending = false
          return Effect.void
        }
        const bounded = timerMs(ms)
        return Effect.clockWith((clock) => isWallClock(clock) ? onWallClock(bounded) : onClock(clock, bounded))
      })
  } as const
}
