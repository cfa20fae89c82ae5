import { Effect, FiberSet, Metric } from "effect"
import type { Route } from "../quota/ProviderBreaker.js"
import { traced } from "../tracing/TraceId.js"

export const tasksWaitingForBreaker = Metric.gauge("tasks_waiting_for_breaker", {
  description: "queued tasks on this runner whose submission an open provider breaker refused, waiting for one look " +
    "per route to find it admitting again"
})

/** Slices a route's woken tasks are spread over, across one look interval. */
const WAKE_SLICES = 16

/**
 * Queued tasks whose provider breaker refused their submission (seed 19.6.3), waiting on this runner for it to admit
 * again. Each such task used to look at the breaker itself every few seconds (its entity woken, a step, a Redis call:
 * ~1.4 ms of CPU a look, measured with 800 queued Runway tasks behind an open breaker: a fifth of a core, growing with
 * the queue). Now each route has one look per interval on this runner (`look`, every `intervalMs()`), and its waiting
 * tasks are woken (`wake`, their lifecycle's change signal) once a look is admitted, spread over one interval as their
 * own jittered looks were, so that an operator's reset still lets them go within seconds. A task waits on its own timer
 * too (the caller's delay), so a wake that never comes (a lost look loop) only delays it. A task whose lifecycle ends
 * (its entity stopped, say, with a shard move) leaves.
 */
export const makeBreakerWaits = (options: {
  readonly look: (route: Route) => Effect.Effect<boolean>
  readonly intervalMs: () => number
}) =>
  Effect.gen(function*() {
    /** per route, its waiting tasks' wakes by task id (a task that waits again holds one entry) */
    const waiting = new Map<string, { readonly route: Route; readonly wakes: Map<string, () => void> }>()
    const fibers = yield* FiberSet.make()
    const count = () => {
      let n = 0
      for (const entry of waiting.values()) n += entry.wakes.size
      return n
    }

    const wakeSpread = (wakes: ReadonlyArray<() => void>) =>
      Effect.gen(function*() {
        const per = Math.ceil(wakes.length / WAKE_SLICES)
        const pause = options.intervalMs() / WAKE_SLICES
        for (let i = 0; i < wakes.length; i += per) {
          if (i > 0) yield* Effect.sleep(pause)
          for (const wake of wakes.slice(i, i + per)) wake()
        }
      })

    const watch = (key: string) =>
      Effect.gen(function*() {
        while (true) {
          yield* Effect.sleep(options.intervalMs())
          const entry = waiting.get(key)
          if (entry === undefined || entry.wakes.size === 0) {
            waiting.delete(key)
            return
          }
          if (!(yield* options.look(entry.route))) continue
          waiting.delete(key)
          yield* Metric.set(tasksWaitingForBreaker, count())
          return yield* traced("BreakerWaits.wake", undefined, () =>
            Effect.logInfo(`provider breaker admits again: waking ${entry.wakes.size} queued tasks`).pipe(
              Effect.annotateLogs({ provider: entry.route.provider, model: entry.route.model }),
              Effect.zipRight(wakeSpread([...entry.wakes.values()]))
            ))
        }
      })

    /** `taskId` waits for `route`'s breaker; `wake` is called once a look at it is admitted. */
    const wait = (route: Route, taskId: string, wake: () => void) =>
      Effect.gen(function*() {
        const key = `${route.provider}/${route.model}`
        const entry = waiting.get(key)
        if (entry !== undefined) entry.wakes.set(taskId, wake)
        else {
          waiting.set(key, { route, wakes: new Map([[taskId, wake]]) })
          yield* FiberSet.run(fibers, watch(key))
        }
        yield* Metric.set(tasksWaitingForBreaker, count())
      })

    /** `taskId` no longer waits here (its lifecycle ended: terminal, idle, or its entity stopped with a shard move). */
    const leave = (taskId: string) =>
      Effect.suspend(() => {
        let left = false
        for (const entry of waiting.values()) left = entry.wakes.delete(taskId) || left
        return left ? Metric.set(tasksWaitingForBreaker, count()) : Effect.void
      })

    return { wait, leave, waiting: count } as const
  })
