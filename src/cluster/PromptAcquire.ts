import { RunnerStorage } from "@effect/cluster"
import type { ShardId } from "@effect/cluster/ShardId"
import { Clock, Duration, Effect, Layer, Metric } from "effect"

/**
 * A runner taking shards that another runner is still letting go gets them as soon as they are free, not a second
 * later.
 *
 * A runner stopping gracefully leaves the runner list first, then stops its entities, then releases its shard locks.
 * A survivor sees the list change at its next assignment refresh and asks for the shards at once: those whose locks
 * are not yet released are refused, and the library asks again only after a fixed second. Measured with
 * bench:handoff, SIGTERM → last task answering on the survivor took 1.25–1.3 s, most of it that second.
 *
 * Here an acquisition that got fewer shards than it asked for asks again for the rest every RETRY_EVERY, for up to
 * RETRY_FOR (less than the library's second), and returns what it has by then. A shard still held after that (its
 * holder is stuck, or not leaving at all: an operator's weights moved it) waits for the library's own next try, as
 * before. Nothing is taken that the storage would not give: the locks decide, as always.
 */
const RETRY_EVERY = Duration.millis(25)
const RETRY_FOR = Duration.millis(800)

const promptAcquisitions = Metric.counter("cluster_shards_acquired_on_retry_total", {
  description: "shards this runner got by asking again within a second (their previous holder was releasing them), " +
    "instead of at the library's next try a second later",
  incremental: true
})

const key = (s: ShardId) => `${s.group}:${s.id}`

export const withPromptAcquire = (inner: RunnerStorage.RunnerStorage["Type"]): RunnerStorage.RunnerStorage["Type"] =>
  RunnerStorage.RunnerStorage.of({
    ...inner,
    acquire: (address, shardIds) =>
      Effect.gen(function*() {
        const wanted = Array.from(shardIds)
        // what the storage answers is every shard whose lock this runner holds (SqlRunnerStorage lists its lock
        // connection's advisory locks), not only the ones asked for: which of `wanted` are missing is looked up by
        // id. Counting them (as this did) took the runner's own shards for the ones asked for, and a survivor that
        // asked while the locks were still being released waited the library's second after all.
        const got = new Map((yield* inner.acquire(address, wanted)).map((s) => [key(s), s]))
        const missing = () => wanted.filter((s) => !got.has(key(s)))
        let rest = missing()
        if (rest.length === 0) return Array.from(got.values())
        const deadline = (yield* Clock.currentTimeMillis) + Duration.toMillis(RETRY_FOR)
        const before = rest.length
        while (rest.length > 0 && (yield* Clock.currentTimeMillis) < deadline) {
          yield* Effect.sleep(RETRY_EVERY)
          for (const s of yield* inner.acquire(address, rest)) got.set(key(s), s)
          rest = missing()
        }
        if (rest.length < before) yield* Metric.incrementBy(promptAcquisitions, before - rest.length)
        return Array.from(got.values())
      })
  })

/** The RunnerStorage below, whose acquisitions ask again promptly for shards still being released. */
export const layerPromptAcquire = Layer.effect(
  RunnerStorage.RunnerStorage,
  Effect.map(RunnerStorage.RunnerStorage, withPromptAcquire)
)
