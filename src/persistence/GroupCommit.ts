import { Deferred, Effect, Queue } from "effect"

/**
 * Natural batching for a write path: callers enqueue and wait; `parallelism` workers each take whatever is
 * queued (up to `maxBatch`) and run it as one batch. Under low load a batch holds one item (no added latency);
 * under high load round trips, syscalls and WAL flushes are shared by many callers.
 */
export const makeGroupCommit = <I, O, E>(options: {
  readonly parallelism: number
  readonly maxBatch: number
  /** Runs one batch; returns one result per item, in order. */
  readonly run: (items: ReadonlyArray<I>) => Effect.Effect<ReadonlyArray<O>, E>
}) =>
  Effect.gen(function*() {
    const queue = yield* Effect.acquireRelease(
      Queue.unbounded<{ readonly item: I; readonly done: Deferred.Deferred<O, E> }>(),
      Queue.shutdown
    )
    const worker = Effect.gen(function*() {
      const entries = yield* Queue.takeBetween(queue, 1, options.maxBatch)
      const batch = Array.from(entries)
      const exit = yield* Effect.exit(options.run(batch.map((e) => e.item)))
      if (exit._tag === "Success") {
        batch.forEach((e, i) => Deferred.unsafeDone(e.done, Effect.succeed(exit.value[i]!)))
      } else {
        batch.forEach((e) => Deferred.unsafeDone(e.done, Effect.failCause(exit.cause)))
      }
    }).pipe(Effect.forever)
    yield* Effect.forkScoped(Effect.all(Array.from({ length: options.parallelism }, () => worker), {
      concurrency: "unbounded",
      discard: true
    }))

    return (item: I): Effect.Effect<O, E> =>
      Effect.flatMap(Deferred.make<O, E>(), (done) =>
        Queue.offer(queue, { item, done }).pipe(Effect.zipRight(Deferred.await(done))))
  })
