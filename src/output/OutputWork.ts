import { Deferred, Effect } from "effect"
import { OutputSettings } from "./outputSettings.js"

interface Waiter {
  readonly deadline: number
  readonly ready: Deferred.Deferred<void>
}

/**
 * Bounded concurrency for output downloads and checks on one runner, granted in order of the output's
 * deadline (the provider's URL expiry): under a backlog the output about to expire goes first.
 */
export class OutputWork extends Effect.Service<OutputWork>()("OutputWork", {
  effect: Effect.gen(function*() {
    const { concurrency: permits } = yield* OutputSettings.config
    const waiting: Array<Waiter> = []
    let running = 0

    const acquire = (deadline: number) =>
      Effect.suspend(() => {
        if (running < permits) {
          running++
          return Effect.void
        }
        return Effect.flatMap(Deferred.make<void>(), (ready) => {
          const waiter = { deadline, ready }
          const at = waiting.findIndex((w) => w.deadline > deadline)
          waiting.splice(at === -1 ? waiting.length : at, 0, waiter)
          return Deferred.await(ready).pipe(
            Effect.onInterrupt(() =>
              Effect.suspend(() => {
                const i = waiting.indexOf(waiter)
                if (i >= 0) waiting.splice(i, 1)
                // granted just as it was interrupted: pass the permit on
                return i >= 0 ? Effect.void : release
              })
            )
          )
        })
      })

    const release: Effect.Effect<void> = Effect.suspend(() => {
      const next = waiting.shift()
      if (next === undefined) {
        running--
        return Effect.void
      }
      return Deferred.succeed(next.ready, undefined)
    })

    /** Runs `work` when a permit is free, earliest deadline first. */
    const run = <A, E, R>(deadline: Date | null, work: Effect.Effect<A, E, R>) =>
      Effect.acquireUseRelease(acquire(deadline?.getTime() ?? Number.MAX_SAFE_INTEGER), () => work, () => release)

    return { run } as const
  })
}) {}
