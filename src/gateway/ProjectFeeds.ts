/**
 * Where Effect stops: a feed's two loops (bus messages, holes filled from PostgreSQL) are Effect fibers, one pair per
 * project on this runner; what they hand to connections is plain synchronous calls, so a connection costs no fiber.
 */
import { Duration, Effect, Either, Exit, Metric, Queue, Runtime, Schema, Scope, Stream } from "effect"
import { NotificationBus } from "../bus/NotificationBus.js"
import { feedRereads } from "../observability/metrics.js"
import { EventLog, type StreamEvent } from "../persistence/EventLog.js"
import { EventCursorFromString } from "../schema/cursor.js"
import { LiveTaskEvent } from "../schema/events.js"
import { StreamSettings } from "./streamSettings.js"

/** Who follows a feed: a connection. Called synchronously, in cursor order, with no gap. */
export interface FeedListener {
  readonly deliver: (event: StreamEvent) => void
  /** The feed cannot go on (its stream was rebuilt under another epoch): the connection must close. */
  readonly lost: () => void
}

const decodeLive = Schema.decodeUnknownEither(Schema.parseJson(LiveTaskEvent))
const decodeCursor = Schema.decodeEither(EventCursorFromString)

/** A live bus message as a stream event; undefined when it is not one (logged by the caller). */
const eventOfMessage = (payload: string): { epoch: number; event: StreamEvent } | undefined => {
  const live = decodeLive(payload)
  if (Either.isLeft(live)) return undefined
  const cursor = decodeCursor(live.right.cursor)
  if (Either.isLeft(cursor)) return undefined
  const committedAt = live.right.committed_at === undefined ? NaN : Date.parse(live.right.committed_at)
  return {
    epoch: cursor.right.epoch,
    event: {
      seq: cursor.right.seq,
      cursor: live.right.cursor,
      type: live.right.event_type,
      payload: live.right.payload,
      ...(live.right.trace_id === undefined ? {} : { traceId: live.right.trace_id }),
      ...(Number.isFinite(committedAt) ? { committedAt } : {})
    }
  }
}

const MAX_PENDING = 10_000

/** Why a feed read PostgreSQL for events the bus did not bring (seed 12.11.6: gap re-reads). */
const rereads = {
  busGap: Metric.tagged(feedRereads, "cause", "bus_gap"),
  hole: Metric.tagged(feedRereads, "cause", "hole"),
  tail: Metric.tagged(feedRereads, "cause", "tail")
}

type Command =
  | { readonly _tag: "Message"; readonly payload: string }
  | { readonly _tag: "Fill" }
  | { readonly _tag: "Events"; readonly events: ReadonlyArray<StreamEvent> }

/** Events the tail reads per lagging project per tick (a feed further behind reads the rest itself). */
const TAIL_PER_PROJECT = 200

/**
 * One project's events on this runner, gap-free and in cursor order, however the bus delivers them. Cursor
 * sequences have no holes, so a hole is visible: a later event waits (briefly) for the missing one, which is
 * then read from PostgreSQL. A bus Gap, a bus outage, or an event that never came (seen in the stream's head
 * by the tail) is filled from PostgreSQL the same way.
 */
interface Feed {
  readonly projectId: string
  readonly epoch: number
  /** the last sequence delivered to listeners: every one before it was delivered too */
  seq: number
  readonly pending: Map<number, StreamEvent>
  readonly listeners: Set<FeedListener>
  readonly commands: Queue.Queue<Command>
  holeTimer: ReturnType<typeof setTimeout> | undefined
  /** the stream's head at the previous tail tick: events up to it should have arrived by now */
  headAtLastTick: number
  readonly scope: Scope.CloseableScope
}

export class ProjectFeeds extends Effect.Service<ProjectFeeds>()("ProjectFeeds", {
  scoped: Effect.gen(function*() {
    const bus = yield* NotificationBus
    const log = yield* EventLog
    const { holeWait, tailInterval } = yield* StreamSettings.config
    const holeWaitMs = Duration.toMillis(holeWait)
    const feeds = new Map<string, Promise<Feed> | Feed>()
    const runtime = yield* Effect.runtime<never>()
    const layerScope = yield* Effect.scope

    const emit = (feed: Feed, event: StreamEvent) => {
      feed.seq = event.seq
      for (const listener of feed.listeners) listener.deliver(event)
    }

    const accept = (feed: Feed, event: StreamEvent) => {
      if (event.seq <= feed.seq) return
      if (event.seq !== feed.seq + 1) {
        // held until the missing one arrives or is read; bounded: past the cap the fill reads them all again
        if (feed.pending.size < MAX_PENDING) feed.pending.set(event.seq, event)
        if (feed.holeTimer === undefined) {
          feed.holeTimer = setTimeout(() => {
            feed.holeTimer = undefined
            rereads.hole.unsafeUpdate(1, [])
            Queue.unsafeOffer(feed.commands, { _tag: "Fill" })
          }, holeWaitMs)
        }
        return
      }
      emit(feed, event)
      for (let next = feed.pending.get(feed.seq + 1); next !== undefined; next = feed.pending.get(feed.seq + 1)) {
        feed.pending.delete(next.seq)
        emit(feed, next)
      }
      if (feed.pending.size === 0 && feed.holeTimer !== undefined) {
        clearTimeout(feed.holeTimer)
        feed.holeTimer = undefined
      }
    }

    /** Reads what the feed misses from PostgreSQL, page by page, up to the stream's end. */
    const fill = (feed: Feed) =>
      log.replay(feed.projectId, feed.seq).pipe(
        Stream.runForEach((event) => Effect.sync(() => accept(feed, event))),
        Effect.zipRight(Effect.sync(() => {
          for (const seq of feed.pending.keys()) if (seq <= feed.seq) feed.pending.delete(seq)
        })),
        Effect.catchAllCause((cause) => Effect.logWarning("feed: reading missed events failed", cause))
      )

    // runs on the feed's own fiber, which closing its scope interrupts: close from outside it
    const lose = (feed: Feed) =>
      Effect.sync(() => {
        if (feeds.get(feed.projectId) === feed) feeds.delete(feed.projectId)
        for (const listener of feed.listeners) listener.lost()
        feed.listeners.clear()
      }).pipe(Effect.zipRight(Effect.forkDaemon(Scope.close(feed.scope, Exit.void))))

    const handle = (feed: Feed) => (command: Command) => {
      if (command._tag === "Fill") return fill(feed)
      if (command._tag === "Events") {
        return Effect.sync(() => {
          command.events.forEach((event) => accept(feed, event))
          if (command.events.length >= TAIL_PER_PROJECT) Queue.unsafeOffer(feed.commands, { _tag: "Fill" })
        })
      }
      const parsed = eventOfMessage(command.payload)
      if (parsed === undefined) return Effect.logWarning("feed: unreadable bus message dropped")
      if (parsed.epoch !== feed.epoch) return lose(feed)
      return Effect.sync(() => accept(feed, parsed.event))
    }

    const start = (projectId: string) =>
      Effect.flatMap(Scope.fork(layerScope, { _tag: "Sequential" }), (scope) =>
        Effect.gen(function*() {
          // subscribe first, then read where the stream stands: nothing committed after the read is missed
          const live = yield* Scope.extend(bus.subscribe(projectId), scope)
          const heads = yield* log.heads([projectId])
          const head = heads.get(projectId)
          if (head === undefined) return yield* Effect.dieMessage(`project ${projectId} has no stream`)
          const feed: Feed = {
            projectId,
            epoch: head.epoch,
            seq: head.lastSeq,
            pending: new Map(),
            listeners: new Set(),
            commands: yield* Queue.unbounded<Command>(),
            holeTimer: undefined,
            headAtLastTick: head.lastSeq,
            scope
          }
          // two plain loops, no Stream pipeline (a feed lives as long as its project has clients: its cost per
          // project matters); every step they take is synchronous or a fill, and fills are idempotent by seq
          const guard = (effect: Effect.Effect<void, unknown>) =>
            effect.pipe(Effect.catchAllCause((cause) => Effect.logError("feed: step failed", cause)))
          const loops = Effect.all([
            Effect.forever(
              Effect.flatMap(Queue.take(live), (e) =>
                guard(
                  e._tag === "Gap"
                    ? Effect.zipRight(Metric.increment(rereads.busGap), handle(feed)({ _tag: "Fill" }))
                    : handle(feed)(e)
                ))
            ),
            Effect.forever(Effect.flatMap(Queue.take(feed.commands), (c) => guard(handle(feed)(c))))
          ], { concurrency: 2, discard: true })
          yield* loops.pipe(
            // it only ends when its scope closes; if it ever stopped otherwise, its listeners must not wait on it
            Effect.onExit((exit) => Exit.isInterrupted(exit) ? Effect.void : lose(feed)),
            Effect.annotateLogs({ project_id: projectId }),
            Effect.forkIn(scope)
          )
          yield* Scope.addFinalizer(
            scope,
            Effect.sync(() => feed.holeTimer !== undefined && clearTimeout(feed.holeTimer))
          )
          return feed
        }).pipe(Effect.onError(() => Scope.close(scope, Exit.void))))

    const acquireFeed = (projectId: string) =>
      Effect.suspend(() => {
        const existing = feeds.get(projectId)
        if (existing !== undefined) {
          return existing instanceof Promise
            ? Effect.promise(() => existing)
            : Effect.succeed(existing)
        }
        // started on the layer's runtime, not the caller's fiber: a follower that goes away meanwhile does not
        // stop it, and the map entry is settled whoever is still waiting
        const starting = Runtime.runPromise(runtime)(start(projectId))
        feeds.set(projectId, starting)
        starting.then(
          (feed) => feeds.get(projectId) === starting && feeds.set(projectId, feed),
          () => feeds.get(projectId) === starting && feeds.delete(projectId)
        )
        return Effect.promise(() => starting)
      })

    const release = (feed: Feed, listener: FeedListener) =>
      Effect.suspend(() => {
        feed.listeners.delete(listener)
        if (feed.listeners.size > 0 || feeds.get(feed.projectId) !== feed) return Effect.void
        feeds.delete(feed.projectId)
        return Scope.close(feed.scope, Exit.void)
      })

    /**
     * Follows a project until `leave` runs (exactly once: the caller's own close path; no Scope per connection,
     * which would keep the opening fiber's state alive for the stream's whole life). Returns the sequence the
     * feed has delivered up to: the listener gets every event after it, so a reader that replays up to it from
     * PostgreSQL misses nothing.
     */
    const follow = (projectId: string, listener: FeedListener) =>
      Effect.map(acquireFeed(projectId), (feed) => {
        feed.listeners.add(listener)
        return { epoch: feed.epoch, seq: feed.seq, current: () => feed.seq, leave: release(feed, listener) }
      })

    // The tail of PostgreSQL: one query for every followed project. While the bus is down every feed behind its
    // stream is filled at once; otherwise only one still missing events its stream had a whole tick ago.
    yield* Effect.gen(function*() {
      const active = [...feeds.values()].filter((f): f is Feed => !(f instanceof Promise))
      if (active.length === 0) return
      const healthy = yield* bus.healthy
      const heads = yield* log.heads(active.map((f) => f.projectId))
      const lagging: Array<Feed> = []
      for (const feed of active) {
        const head = heads.get(feed.projectId)
        if (head === undefined) continue
        if (head.epoch !== feed.epoch) {
          yield* lose(feed) // the stream was rebuilt: its clients reconnect and get a reset
          continue
        }
        if (feed.seq < head.lastSeq && (!healthy || feed.seq < feed.headAtLastTick)) lagging.push(feed)
        feed.headAtLastTick = head.lastSeq
      }
      // every lagging feed's missing events in one query, however many projects: the tail must stay cheap exactly
      // when the bus is down or behind
      const missing = yield* log.tail(
        lagging.map((f) => ({ projectId: f.projectId, afterSeq: f.seq })),
        TAIL_PER_PROJECT
      )
      for (const feed of lagging) {
        const events = missing.get(feed.projectId)
        if (events === undefined) continue
        yield* Metric.increment(rereads.tail)
        Queue.unsafeOffer(feed.commands, { _tag: "Events", events })
      }
    }).pipe(
      Effect.catchAllCause((cause) => Effect.logWarning("feed tail failed", cause)),
      Effect.zipRight(Effect.sleep(tailInterval)),
      Effect.forever,
      Effect.forkScoped
    )

    /** Feeds followed on this runner (for the bench and operators). */
    const size = Effect.sync(() => feeds.size)

    return { follow, size } as const
  })
}) {}
