import { type Duration, Effect } from "effect"

/**
 * The loop of the cluster singletons that look for work on a clock (the sweeper, the reconcilers, event retention),
 * where `runWakeLoop` is woken by PostgreSQL: every `interval`, each of `checks` in turn. A check that fails is
 * logged as `failure` with its cause; the checks after it and the next round run all the same.
 */
export const runPeriodically = <R>(options: {
  readonly interval: Duration.DurationInput
  readonly failure: string
  readonly checks: ReadonlyArray<Effect.Effect<unknown, unknown, R>>
}): Effect.Effect<never, never, R> =>
  Effect.forEach(
    options.checks,
    (check) => Effect.catchAllCause(check, (cause) => Effect.logWarning(options.failure, cause)),
    { discard: true }
  ).pipe(Effect.zipRight(Effect.sleep(options.interval)), Effect.forever)
