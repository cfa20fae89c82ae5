import { Cause, Duration, Effect, Either, Exit, FiberId, FiberSet } from "effect"
import { groupCommitBatchSize, groupCommitSeconds } from "../observability/metrics.js"
import { labelled } from "../observability/series.js"

/**
 * Natural batching for a write path: callers enqueue and wait; up to `parallelism` batches run at once, each taking
 * whatever is queued (up to `maxBatch`) as one batch. Under low load a batch holds one item (no added latency);
 * under high load round trips, syscalls and WAL flushes are shared by many callers. What is queued in one turn of
 * the event loop goes together.
 *
 * Every taken entry is completed whatever happens to its batch: a failure, a defect (even a synchronous throw in
 * `run`) or an interruption reaches exactly the callers of that batch, and the other batches carry on. On shutdown,
 * entries still queued and batches still running end with an interruption.
 *
 * The queue is a plain array and a caller waits on a callback: a Queue, a Deferred and a worker fiber's wake-up per
 * item cost more than the write's own share of a batch on the webhook path (bench:webhooks).
 */
export const makeGroupCommit = <I, O, E>(options: {
  /** The writer's name in the batch size and commit time metrics (label `writer`). */
  readonly name: string
  readonly parallelism: number
  readonly maxBatch: number
  /**
   * While a batch runs, another starts only once this many items wait (default 1: at once). A writer whose statement
   * costs much per call (the inbox's) keeps its batches large this way and still overlaps them under heavy load.
   */
  readonly moreWhenQueued?: number
  /** Runs one batch; returns one result per item, in order. */
  readonly run: (items: ReadonlyArray<I>) => Effect.Effect<ReadonlyArray<O>, E>
}) =>
  Effect.gen(function*() {
    type Entry = { readonly item: I; readonly done: (exit: Exit.Exit<O, E>) => void }
    const batchSize = labelled(groupCommitBatchSize, { writer: options.name })
    const commitSeconds = labelled(groupCommitSeconds, { writer: options.name })
    const interrupted = Exit.interrupt(FiberId.none)
    let queued: Array<Entry> = []
    let running = 0
    let soon = false
    let closed = false
    const fork = yield* FiberSet.makeRuntime<never>()

    /**
     * Tells every entry its exit, even past a caller's callback that throws (an `offer` caller's: plain code), and
     * logs what was thrown (the caller that threw has its answer already; the others still get theirs).
     */
    const tell = (entries: ReadonlyArray<Entry>, exitOf: (i: number) => Exit.Exit<O, E>): Effect.Effect<void> => {
      const thrown: Array<unknown> = []
      entries.forEach((e, i) => {
        try {
          e.done(exitOf(i))
        } catch (error) {
          thrown.push(error)
        }
      })
      return thrown.length === 0 ? Effect.void : Effect.logError(
        `group commit (${options.name}): a caller's callback threw`,
        Cause.die(thrown[0])
      ).pipe(Effect.annotateLogs({ callbacks_thrown: thrown.length }))
    }

    const settle = (batch: ReadonlyArray<Entry>, exit: Exit.Exit<ReadonlyArray<O>, E>) =>
      tell(batch, (i) =>
        Exit.isFailure(exit)
          ? Exit.failCause(exit.cause)
          : exit.value[i] === undefined
          ? Exit.die(new Error("group commit: no result for an item"))
          : Exit.succeed(exit.value[i]!))

    const runBatch = (batch: ReadonlyArray<Entry>) =>
      Effect.suspend(() => options.run(batch.map((e) => e.item))).pipe(
        Effect.exit,
        Effect.timed,
        Effect.flatMap(([took, exit]) => {
          batchSize.unsafeUpdate(batch.length, [])
          commitSeconds.unsafeUpdate(Duration.toSeconds(took), [])
          return settle(batch, exit)
        }),
        Effect.onInterrupt(() => settle(batch, interrupted)),
        Effect.ensuring(Effect.sync(() => {
          running--
          drain()
        }))
      )

    const moreWhenQueued = Math.max(1, options.moreWhenQueued ?? 1)
    const drain = () => {
      soon = false
      while (
        !closed && running < options.parallelism && queued.length >= (running === 0 ? 1 : moreWhenQueued)
      ) {
        const batch = queued.length <= options.maxBatch ? queued : queued.slice(0, options.maxBatch)
        queued = queued.length <= options.maxBatch ? [] : queued.slice(options.maxBatch)
        running++
        fork(runBatch(batch))
      }
    }

    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        closed = true
        const rest = queued
        queued = []
        return tell(rest, () => interrupted)
      })
    )

    const offer = (item: I, done: (exit: Exit.Exit<O, E>) => void): void => {
      if (closed) return done(interrupted)
      queued.push({ item, done })
      if (soon) return
      soon = true
      queueMicrotask(drain)
    }
    // `offer` for a caller with no fiber of its own (the webhook path): `done` runs when the item's batch ends
    return Object.assign((item: I): Effect.Effect<O, E> => Effect.async<O, E>((resume) => offer(item, resume)), {
      offer
    })
  })

/**
 * A group's statement (`run`: one result per item, in order), and on its failure each item's statement alone, so that
 * one item that fails the statement (a constraint, a deadlock with another writer) fails only itself.
 */
export const oneByOneOnFailure = <I, O, E>(
  items: ReadonlyArray<I>,
  run: (group: ReadonlyArray<I>) => Effect.Effect<ReadonlyArray<O>, E>
): Effect.Effect<ReadonlyArray<Either.Either<O, E>>> =>
  run(items).pipe(
    Effect.map((results) => results.map((r) => Either.right(r))),
    Effect.catchAll((error) =>
      items.length === 1
        ? Effect.succeed([Either.left(error)])
        : Effect.forEach(items, (item) => Effect.either(Effect.map(run([item]), (r) => r[0]!)))
    )
  )
