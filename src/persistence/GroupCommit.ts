import { Cause, Deferred, Duration, Effect, Exit, Metric, Queue } from "effect"
import { groupCommitBatchSize, groupCommitSeconds } from "../observability/metrics.js"

/**
 * Natural batching for a write path: callers enqueue and wait; `parallelism` workers each take whatever is
 * queued (up to `maxBatch`) and run it as one batch. Under low load a batch holds one item (no added latency);
 * under high load round trips, syscalls and WAL flushes are shared by many callers.
 *
 * Every taken entry is completed whatever happens to its batch: a failure, a defect (even a synchronous
 * throw in `run`) or an interruption of the worker reaches exactly the callers of that batch, and the other
 * workers carry on. On shutdown, entries still queued fail with an interruption.
 */
export const makeGroupCommit = <I, O, E>(options: {
  /** The writer's name in the batch size and commit time metrics (label `writer`). */
  readonly name: string
  readonly parallelism: number
  readonly maxBatch: number
  /** Runs one batch; returns one result per item, in order. */
  readonly run: (items: ReadonlyArray<I>) => Effect.Effect<ReadonlyArray<O>, E>
}) =>
  Effect.gen(function*() {
    type Entry = { readonly item: I; readonly done: Deferred.Deferred<O, E> }
    const queue = yield* Effect.acquireRelease(Queue.unbounded<Entry>(), (q) =>
      Effect.flatMap(Queue.takeAll(q), (rest) =>
        Effect.zipRight(
          Effect.forEach(rest, (e) =>
            Deferred.interrupt(e.done), { discard: true }),
          Queue.shutdown(q)
        )))

    const batchSize = Metric.tagged(groupCommitBatchSize, "writer", options.name)
    const commitSeconds = Metric.tagged(groupCommitSeconds, "writer", options.name)
    const runBatch = (batch: ReadonlyArray<Entry>) =>
      Effect.suspend(() =>
        options.run(batch.map((e) => e.item))
      ).pipe(
        Effect.exit,
        Effect.timed,
        Effect.tap(([took]) =>
          Effect.zipRight(
            Metric.update(batchSize, batch.length),
            Metric.update(commitSeconds, Duration.toSeconds(took))
          )
        ),
        Effect.map(([, exit]) => exit),
        Effect.flatMap((exit) =>
          Effect.forEach(batch, (e, i) =>
            Deferred.done(
              e.done,
              Exit.isSuccess(exit)
                ? (exit.value[i] === undefined
                  ? Exit.die(new Error("group commit: no result for an item"))
                  : Exit.succeed(exit.value[i]!))
                : Exit.failCause(exit.cause)
            ), { discard: true })
        ),
        Effect.onInterrupt(() => Effect.forEach(batch, (e) => Deferred.interrupt(e.done), { discard: true }))
      )

    const worker = Queue.takeBetween(queue, 1, options.maxBatch).pipe(
      Effect.flatMap((entries) => runBatch(Array.from(entries))),
      Effect.catchAllCause((cause) =>
        Cause.isInterruptedOnly(cause) ? Effect.failCause(cause) : Effect.logError("group commit worker", cause)
      ),
      Effect.forever
    )
    for (let i = 0; i < options.parallelism; i++) yield* Effect.forkScoped(worker)

    return (item: I): Effect.Effect<O, E> =>
      Effect.flatMap(
        Deferred.make<O, E>(),
        (done) => Queue.offer(queue, { item, done }).pipe(Effect.zipRight(Deferred.await(done)))
      )
  })
