import {
  MessageStorage,
  RunnerAddress,
  RunnerHealth,
  Runners,
  RunnerStorage,
  Sharding,
  ShardingConfig,
  SqlRunnerStorage
} from "@effect/cluster"
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Fiber, Layer, Logger, Option, Stream, SubscriptionRef } from "effect"
import { RunnerSettings } from "../../src/runners/RunnerConfig.js"
import { layerTestDatabase, noDatabase } from "../support/database.js"
import { scaled } from "../support/env.js"

/** How long the event loop stalls while a lock renewal is in flight: what a loaded runner showed (1–3 s windows). */
const STALL_MS = 3_000
const SHARD_LOCK_LOSS = "Shard lock storage is unhealthy"

/** Blocks the event loop, as a long synchronous step (a big JSON batch, a bulk decode) does. */
const stall = (ms: number) =>
  Effect.sync(() => {
    const until = Date.now() + ms
    while (Date.now() < until) {
      // busy: nothing else runs, no socket is read, no timer fires
    }
  })

/**
 * The runner storage whose `refresh` (the cluster's lock renewal) is sent, then the event loop stalls before its
 * answer can be read, `stalls` times; afterwards the refreshes go through untouched. Renewals answered are counted.
 */
interface Progress {
  readonly done: number
  readonly renewals: number
}

/** Waits for the stalls' progress to satisfy `p`: woken by each change, no polling. */
const progressReaches = (progress: SubscriptionRef.SubscriptionRef<Progress>, p: (now: Progress) => boolean) =>
  progress.changes.pipe(Stream.filter(p), Stream.runHead)

const layerStallingRefresh = (stalls: { remaining: number }, progress: SubscriptionRef.SubscriptionRef<Progress>) =>
  Layer.effect(
    RunnerStorage.RunnerStorage,
    Effect.map(RunnerStorage.RunnerStorage, (inner) =>
      RunnerStorage.RunnerStorage.of({
        ...inner,
        refresh: (address, shardIds) =>
          Effect.gen(function*() {
            const ids = Array.from(shardIds)
            const renewal = yield* Effect.fork(inner.refresh(address, ids))
            // the renewal's query goes out, then the loop stalls with its answer unread
            yield* Effect.yieldNow()
            if (stalls.remaining > 0 && ids.length > 0) {
              stalls.remaining--
              yield* stall(STALL_MS)
              yield* SubscriptionRef.update(progress, (p) => ({ ...p, done: p.done + 1 }))
            }
            const renewed = yield* Fiber.join(renewal)
            yield* SubscriptionRef.update(progress, (p) => ({ ...p, renewals: p.renewals + 1 }))
            return renewed
          })
      }))
  )

describe.skipIf(noDatabase)("shard locks under a stalled event loop", () => {
  it.live(
    `the runner's default lock settings keep its shards through a ${STALL_MS} ms stall during a renewal`,
    () =>
      Effect.gen(function*() {
        // the runner's own defaults (RunnerConfig.ts), not this machine's environment
        const c = yield* RunnerSettings.config.pipe(Effect.withConfigProvider(ConfigProvider.fromMap(new Map())))
        const losses: Array<string> = []
        const stalls = { remaining: 2 }
        const progress = yield* SubscriptionRef.make<Progress>({ done: 0, renewals: 0 })
        const sharding = Sharding.layer.pipe(
          Layer.provide(Runners.layerNoop),
          Layer.provide([MessageStorage.layerNoop, RunnerHealth.layerNoop]),
          Layer.provide(layerStallingRefresh(stalls, progress)),
          Layer.provide(SqlRunnerStorage.layer),
          Layer.provide(ShardingConfig.layer({
            runnerAddress: Option.some(RunnerAddress.make("127.0.0.1", 1)),
            shardsPerGroup: 10,
            shardLockExpiration: c.shardLockExpiration,
            shardLockRefreshInterval: c.shardLockRefreshInterval,
            refreshAssignmentsInterval: c.refreshAssignmentsInterval,
            entityMessagePollInterval: c.entityMessagePollInterval
          })),
          Layer.provide(layerTestDatabase(4))
        )
        const counting = Logger.add(Logger.make(({ message }) => {
          if (String(message).includes(SHARD_LOCK_LOSS)) losses.push(String(message))
        }))
        yield* Effect.gen(function*() {
          // both stalls happen during renewals of held locks, then one clean renewal after them
          const stalled = yield* progressReaches(progress, (p) => p.done >= 2)
          // the second stalled renewal answers, then a clean one after it: a loss would have been logged by then
          const renewals = Option.getOrThrow(stalled).renewals
          yield* progressReaches(progress, (p) => p.renewals >= renewals + 2)
        }).pipe(Effect.provide(sharding), Effect.timeout(scaled(120_000)), Effect.orDie, Effect.provide(counting))
        expect(losses).toEqual([])
      }),
    scaled(180_000)
  )
})
