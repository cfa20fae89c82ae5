/**
 * Where Effect stops: a project feed is a plain object fed synchronously by its bus listener, and hands events to its
 * connections by plain calls. Two fibers, a queue and a Scope per feed measured ~40 KiB of heap per project (10 KiB
 * per idle stream at fan-out 4); a feed now holds a few small objects. Effects run only while there is I/O: starting a
 * feed (subscribe, read its head), a fill from PostgreSQL, and the one tail loop of every feed.
 */
import { Duration, Effect, Either, type Exit, Metric, Option, Runtime, Schema, Stream } from "effect"
import { type BusEvent, NotificationBus } from "../bus/NotificationBus.js"
import { feedRereads } from "../observability/metrics.js"
import { EventLog, type StreamEvent } from "../persistence/EventLog.js"
import { EventCursorFromString } from "../schema/cursor.js"
import type { StorageUnavailable } from "../schema/errors.js"
import { LiveTaskEvent } from "../schema/events.js"
import type { ProjectId, TenantId } from "../schema/ids.js"
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
  /** the project's tenant (read with its head when the feed started): a stream of another tenant is refused */
  readonly tenantId: string
  readonly epoch: number
  /** the last sequence retention had forgotten when the feed started (it only grows: a replay finds what it lost) */
  readonly retainedSeq: number
  /** the last sequence delivered to listeners: every one before it was delivered too */
  seq: number
  /** events after a hole, until it is filled (allocated on the first hole) */
  pending: Map<number, StreamEvent> | undefined
  readonly listeners: Set<FeedListener>
  holeTimer: ReturnType<typeof setTimeout> | undefined
  /** the stream's head at the previous tail tick: events up to it should have arrived by now */
  headAtLastTick: number
  /** a fill is running; `fillAgain`: another was asked for meanwhile */
  filling: boolean
  fillAgain: boolean
  /** tail ticks in a row that found no listener: a feed lingers one tick (a reconnecting client finds it) */
  idleTicks: number
  closed: boolean
  readonly unlisten: () => void
}

/** Where a followed feed stands (a connection replays from PostgreSQL up to `seq`, then takes the feed's events). */
export interface FeedHead {
  readonly tenantId: string
  readonly epoch: number
  readonly seq: number
  readonly retainedSeq: number
}

/**
 * A listener following a feed, until `leave`. A class: a stream holds one for its life, two fields and no closures.
 */
export class Following {
  constructor(private readonly feed: Feed, private readonly listener: FeedListener) {}

  get epoch(): number {
    return this.feed.epoch
  }

  /** the sequence the feed has delivered up to now */
  current(): number {
    return this.feed.seq
  }

  /** stops following (idempotent) */
  leave(): void {
    this.feed.listeners.delete(this.listener)
  }
}

export class ProjectFeeds extends Effect.Service<ProjectFeeds>()("ProjectFeeds", {
  scoped: Effect.gen(function*() {
    const bus = yield* NotificationBus
    const log = yield* EventLog
    const { holeWait, tailInterval } = yield* StreamSettings.config
    const holeWaitMs = Duration.toMillis(holeWait)
    const feeds = new Map<string, Feed>()
    /** feeds being started, by tenant and project: concurrent opens of a project wait for the same start */
    const starting = new Map<string, Promise<Exit.Exit<Option.Option<Feed>, StorageUnavailable>>>()
    const runtime = yield* Effect.runtime<never>()
    const runFork = Runtime.runFork(runtime)

    const emit = (feed: Feed, event: StreamEvent) => {
      feed.seq = event.seq
      for (const listener of feed.listeners) listener.deliver(event)
    }

    const accept = (feed: Feed, event: StreamEvent) => {
      if (feed.closed || event.seq <= feed.seq) return
      if (event.seq !== feed.seq + 1) {
        // held until the missing one arrives or is read; bounded: past the cap the fill reads them all again
        const pending = feed.pending ??= new Map()
        if (pending.size < MAX_PENDING) pending.set(event.seq, event)
        if (feed.holeTimer === undefined) {
          feed.holeTimer = setTimeout(() => {
            feed.holeTimer = undefined
            rereads.hole.unsafeUpdate(1, [])
            requestFill(feed)
          }, holeWaitMs)
        }
        return
      }
      emit(feed, event)
      const pending = feed.pending
      if (pending === undefined) return
      for (let next = pending.get(feed.seq + 1); next !== undefined; next = pending.get(feed.seq + 1)) {
        pending.delete(next.seq)
        emit(feed, next)
      }
      if (pending.size === 0) {
        feed.pending = undefined
        if (feed.holeTimer !== undefined) clearTimeout(feed.holeTimer)
        feed.holeTimer = undefined
      }
    }

    /** Reads what the feed misses from PostgreSQL, page by page, up to the stream's end. */
    const fill = (feed: Feed) =>
      log.replay(feed.projectId, feed.seq).pipe(
        Stream.runForEach((event) => Effect.sync(() => accept(feed, event))),
        Effect.zipRight(Effect.sync(() => {
          if (feed.pending === undefined) return
          for (const seq of feed.pending.keys()) if (seq <= feed.seq) feed.pending.delete(seq)
        })),
        Effect.catchAllCause((cause) => Effect.logWarning("feed: reading missed events failed", cause)),
        Effect.annotateLogs({ project_id: feed.projectId })
      )

    /** One fill at a time per feed; one asked for meanwhile runs after it (it reads from where that one ended). */
    const requestFill = (feed: Feed): void => {
      if (feed.closed) return
      if (feed.filling) return void (feed.fillAgain = true)
      feed.filling = true
      runFork(Effect.ensuring(
        fill(feed),
        Effect.sync(() => {
          feed.filling = false
          if (!feed.fillAgain) return
          feed.fillAgain = false
          requestFill(feed)
        })
      ))
    }

    const close = (feed: Feed) => {
      if (feed.closed) return
      feed.closed = true
      if (feeds.get(feed.projectId) === feed) feeds.delete(feed.projectId)
      if (feed.holeTimer !== undefined) clearTimeout(feed.holeTimer)
      feed.unlisten()
    }

    /** The stream was rebuilt under another epoch: its clients reconnect and get a reset. */
    const lose = (feed: Feed) => {
      close(feed)
      for (const listener of feed.listeners) listener.lost()
      feed.listeners.clear()
    }

    const onBus = (feed: Feed, event: BusEvent) => {
      if (event._tag === "Gap") {
        rereads.busGap.unsafeUpdate(1, [])
        return requestFill(feed)
      }
      const parsed = eventOfMessage(event.payload)
      if (parsed === undefined) {
        return void runFork(
          Effect.logWarning("feed: unreadable bus message dropped").pipe(
            Effect.annotateLogs({ project_id: feed.projectId })
          )
        )
      }
      if (parsed.epoch !== feed.epoch) return lose(feed)
      accept(feed, parsed.event)
    }

    /**
     * Starts a project's feed for `tenantId`: none when the project is not that tenant's. Listens first, then reads
     * where the stream stands: nothing committed after the read is missed (what came before it is dropped by seq).
     */
    const start = (tenantId: TenantId, projectId: ProjectId) =>
      Effect.gen(function*() {
        const early: Array<BusEvent> = []
        let feed: Feed | undefined
        const unlisten = yield* bus.listen(projectId, (e) => feed === undefined ? void early.push(e) : onBus(feed, e))
        const head = yield* Effect.onError(log.open(tenantId, projectId), () => Effect.sync(unlisten))
        if (Option.isNone(head)) {
          unlisten()
          return Option.none<Feed>()
        }
        const existing = feeds.get(projectId)
        if (existing !== undefined) {
          // started meanwhile by the same tenant's other request: one feed per project
          unlisten()
          return Option.some(existing)
        }
        feed = {
          projectId,
          tenantId,
          epoch: head.value.epoch,
          retainedSeq: head.value.retainedSeq,
          seq: head.value.lastSeq,
          pending: undefined,
          listeners: new Set(),
          holeTimer: undefined,
          headAtLastTick: head.value.lastSeq,
          filling: false,
          fillAgain: false,
          idleTicks: 0,
          closed: false,
          unlisten
        }
        feeds.set(projectId, feed)
        for (const e of early) onBus(feed, e)
        return Option.some(feed)
      })

    const headOf = (feed: Feed): FeedHead => ({
      tenantId: feed.tenantId,
      epoch: feed.epoch,
      seq: feed.seq,
      retainedSeq: feed.retainedSeq
    })

    /** The project's feed on this runner, if one is running (synchronous: the open path needs no I/O then). */
    const peek = (projectId: string): FeedHead | undefined => {
      const feed = feeds.get(projectId)
      return feed === undefined ? undefined : headOf(feed)
    }

    /**
     * The project's feed for `tenantId`, started if needed: none when the project is not that tenant's. A start runs
     * on the layer's runtime, not the caller's fiber: a client that goes away meanwhile does not stop it, and
     * whoever else waits for it gets it.
     */
    const acquire = (
      tenantId: TenantId,
      projectId: ProjectId
    ): Effect.Effect<Option.Option<Feed>, StorageUnavailable> =>
      Effect.suspend(() => {
        const existing = feeds.get(projectId)
        if (existing !== undefined) {
          return Effect.succeed(existing.tenantId === tenantId ? Option.some(existing) : Option.none())
        }
        const key = `${tenantId}/${projectId}`
        let pending = starting.get(key)
        if (pending === undefined) {
          const started = Runtime.runPromiseExit(runtime)(start(tenantId, projectId))
          starting.set(key, started)
          const done = () => void (starting.get(key) === started && starting.delete(key))
          void started.then(done)
          pending = started
        }
        const awaited = pending
        return Effect.flatten(Effect.promise(() => awaited))
      })

    /** The head of the project's feed, started if needed (none: not this tenant's project). */
    const head = (tenantId: TenantId, projectId: ProjectId) =>
      Effect.map(acquire(tenantId, projectId), Option.map(headOf))

    /**
     * Follows a project until `leave` runs (the connection's own close path; no Scope per connection, which would
     * keep the opening fiber's state alive for the stream's whole life). The listener gets every event after
     * `current()` at the time of the call, so a reader that replays up to it from PostgreSQL misses nothing.
     */
    const follow = (tenantId: TenantId, projectId: ProjectId, listener: FeedListener) =>
      Effect.map(
        acquire(tenantId, projectId),
        Option.map((feed): Following => {
          feed.listeners.add(listener)
          feed.idleTicks = 0
          return new Following(feed, listener)
        })
      )

    // The tail of PostgreSQL: one query for every followed project. While the bus is down every feed behind its
    // stream is filled at once; otherwise only one still missing events its stream had a whole tick ago. A feed
    // nobody followed for a whole tick is closed here.
    yield* Effect.gen(function*() {
      const active: Array<Feed> = []
      for (const feed of feeds.values()) {
        if (feed.listeners.size > 0) feed.idleTicks = 0
        else if (++feed.idleTicks > 1) close(feed)
        if (!feed.closed) active.push(feed)
      }
      if (active.length === 0) return
      const healthy = yield* bus.healthy
      // only the heads that moved past a feed (or changed epoch) come back: a feed not among them had its stream's
      // head already, the sequence it was asked with
      const asked = active.map((f) => ({ projectId: f.projectId, seq: f.seq, epoch: f.epoch }))
      const heads = yield* log.headsPast(asked)
      const lagging: Array<Feed> = []
      for (let i = 0; i < active.length; i++) {
        const feed = active[i]!
        if (feed.closed) continue
        const head = heads.get(feed.projectId)
        if (head === undefined) {
          feed.headAtLastTick = asked[i]!.seq
          continue
        }
        if (head.epoch !== feed.epoch) {
          lose(feed) // the stream was rebuilt: its clients reconnect and get a reset
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
        for (const event of events) accept(feed, event)
        if (events.length >= TAIL_PER_PROJECT) requestFill(feed)
      }
    }).pipe(
      Effect.catchAllCause((cause) => Effect.logWarning("feed tail failed", cause)),
      Effect.zipRight(Effect.sleep(tailInterval)),
      Effect.forever,
      Effect.forkScoped
    )

    yield* Effect.addFinalizer(() => Effect.sync(() => [...feeds.values()].forEach(close)))

    /** Feeds running on this runner (for the bench and operators). */
    const size = Effect.sync(() => feeds.size)

    return { peek, head, follow, size } as const
  })
}) {}
