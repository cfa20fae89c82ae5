import { RunnerStorage, ShardingConfig } from "@effect/cluster"
import { Cause, Context, Duration, Effect, Exit, Layer, Option } from "effect"

/**
 * What the cluster itself last learnt of its shard-lock storage. @effect/cluster keeps "Shard lock storage is
 * unhealthy" to itself (a private flag of Sharding, only logged), but it reaches that verdict from one call: every
 * shard-lock interval (min(SHARD_LOCK_REFRESH_INTERVAL, SHARD_LOCK_EXPIRATION / 3)) it calls RunnerStorage.refresh
 * for the locks it holds (a probe with none while unhealthy), and a refresh that fails or outlasts the interval is
 * what marks the storage unhealthy. So the runner storage is wrapped here and that call's outcomes recorded: the
 * readiness check reads the cluster's own last answer, and adds no query of its own to the lock connection.
 */
export interface ShardLockView {
  /** When the last refresh succeeded (epoch ms), if one has. */
  readonly lastOk: Option.Option<number>
  /** The last refresh that failed or was cut off (by the cluster's own timeout), if it came after the last success. */
  readonly lastFailure: Option.Option<{ readonly at: number; readonly error: string }>
}

export class ShardLockWatch extends Context.Tag("ShardLockWatch")<ShardLockWatch, {
  readonly view: Effect.Effect<ShardLockView>
  /** None while the storage is healthy; else why not (see `shardLocksHealthy`). */
  readonly problem: Effect.Effect<Option.Option<string>>
}>() {}

/** Healthy when the last refresh succeeded and is recent: within `stale` (the lock expiration: by then locks lapse). */
export const shardLocksHealthy = (view: ShardLockView, stale: Duration.Duration, now: number): Option.Option<string> =>
  Option.match(view.lastFailure, {
    onSome: (f) => Option.some(`shard lock refresh failed: ${f.error}`),
    onNone: () =>
      Option.match(view.lastOk, {
        onNone: () => Option.some("no shard lock refresh yet"),
        onSome: (at) =>
          now - at > Duration.toMillis(stale)
            ? Option.some(`no shard lock refresh for ${Math.round((now - at) / 1000)} s`)
            : Option.none()
      })
  })

const describe = (exit: Exit.Exit<unknown, unknown>): string =>
  Exit.match(exit, {
    onSuccess: () => "",
    onFailure: (cause) =>
      Option.match(Cause.failureOption(cause), {
        onSome: (e) => String((e as { readonly message?: unknown }).message ?? e),
        // the cluster interrupts a refresh that outlasts its interval
        onNone: () => Cause.isInterruptedOnly(cause) ? "timed out" : "defect"
      })
  })

/**
 * The runner storage below, with every `refresh` observed; provides the storage (to Sharding) and the watch (to
 * `/readyz`). Put it between SqlRunnerStorage and the runner (Cluster.ts).
 */
export const layerWatched: Layer.Layer<
  RunnerStorage.RunnerStorage | ShardLockWatch,
  never,
  RunnerStorage.RunnerStorage | ShardingConfig.ShardingConfig
> = Layer.effectContext(Effect.gen(function*() {
  const storage = yield* RunnerStorage.RunnerStorage
  const { shardLockExpiration } = yield* ShardingConfig.ShardingConfig
  let view: ShardLockView = { lastOk: Option.none(), lastFailure: Option.none() }
  const record = (exit: Exit.Exit<unknown, unknown>) =>
    Effect.sync(() => {
      const at = Date.now()
      view = Exit.isSuccess(exit)
        ? { lastOk: Option.some(at), lastFailure: Option.none() }
        : { ...view, lastFailure: Option.some({ at, error: describe(exit) }) }
    })
  const watched = RunnerStorage.RunnerStorage.of({
    ...storage,
    refresh: (address, shardIds) => storage.refresh(address, shardIds).pipe(Effect.onExit((exit) => record(exit)))
  })
  return Context.make(RunnerStorage.RunnerStorage, watched).pipe(
    Context.add(ShardLockWatch, {
      view: Effect.sync(() => view),
      problem: Effect.sync(() => shardLocksHealthy(view, Duration.decode(shardLockExpiration), Date.now()))
    })
  )
}))
