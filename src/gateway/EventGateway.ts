/**
 * Where Effect stops: opening a stream (limits, cursor check, subscribe, replay) is an Effect; the open stream is a
 * plain `Connection` object fed synchronously by its project feed. A Scope and a fiber per connection kept the
 * opening fiber's state for the stream's life: dropping them took an idle stream from 20.6 to 10.2 KiB of heap.
 */
import { Effect, Exit, Metric, Option, Stream } from "effect"
import { bufferDepth, slowClientCuts, streamResets } from "../observability/metrics.js"
import {
  checkCursor,
  type CursorProblem,
  EventLog,
  type StreamEvent,
  type StreamHead
} from "../persistence/EventLog.js"
import { EventCursor } from "../schema/cursor.js"
import { ProjectNotFound, type StorageUnavailable } from "../schema/errors.js"
import type { ProjectId, TenantId, UserId } from "../schema/ids.js"
import { ConnectionBuffer } from "./ConnectionBuffer.js"
import { ConnectionLimits, TooManyConnections } from "./ConnectionLimits.js"
import { type FeedListener, type Following, ProjectFeeds } from "./ProjectFeeds.js"
import { StreamSettings } from "./streamSettings.js"

export type CloseReason = "overflow" | "stalled" | "stream_lost" | "shutdown"

// the metrics a connection touches from plain code, tagged once
const cuts = {
  overflow: Metric.tagged(slowClientCuts, "reason", "overflow"),
  stalled: Metric.tagged(slowClientCuts, "reason", "stalled")
}
const resetCount = (problem: CursorProblem) => Metric.tagged(streamResets, "reason", problem).unsafeUpdate(1, [])

/** How a gateway writes to one client: SSE or WebSocket. Writes never block; `false` means "backed up". */
export interface Transport {
  /** The stream is admitted: send the response head (before any event). */
  readonly open: () => void
  readonly send: (event: StreamEvent) => boolean
  readonly reset: (problem: CursorProblem, cursor: string) => boolean
  /** Calls `f` once the client has read what was written, or `stalled` past the transport's write deadline. */
  readonly whenDrained: (f: () => void, stalled: () => void) => void
  readonly close: (reason: CloseReason) => void
}

export interface StreamRequest {
  readonly tenantId: TenantId
  readonly userId: UserId
  readonly projectId: ProjectId
  /** where the client stands (Last-Event-ID, ?after=); none: from now on */
  readonly after: EventCursor | undefined
  /** only this task's events */
  readonly taskId: string | undefined
}

/** A stream let in by the limits, not yet opened (see `admit`). */
export interface Admission {
  readonly request: StreamRequest
  readonly head: StreamHead
  /** Gives its place in the limits back; idempotent (the opened stream calls it when it ends). */
  readonly release: () => void
}

/**
 * One client's stream. It replays from PostgreSQL, then takes the feed's live events; whatever arrives while it
 * replays, or while the client is not reading, waits in its bounded buffer. A sequence it already sent is never
 * sent again, and it sends in cursor order, so the client's cursor (Last-Event-ID) is always gap-free. An idle one
 * holds its fields and nothing else: its buffer is made when something must wait, its callbacks when it backs up.
 */
class Connection implements FeedListener {
  lastSeq = 0
  live = false
  holding = false
  blocked = false
  closed = false
  /** the transport's close path ran (the client is gone): its place and its feed are given back */
  gone = false
  buffer: ConnectionBuffer | undefined = undefined
  following: Following | undefined = undefined

  constructor(
    readonly transport: Transport,
    readonly admission: Admission,
    readonly stats: GatewayStats
  ) {}

  private get capacity(): number {
    return this.stats.capacity
  }

  deliver(event: StreamEvent): void {
    if (this.closed || event.seq <= this.lastSeq) return
    // while replaying, the feed's events are read from PostgreSQL by the replay itself (it catches up with the
    // feed before going live); only the last catch-up holds them, if the replay could not catch up alone
    if (!this.live && !this.holding) return
    if (!this.live || this.blocked || (this.buffer !== undefined && this.buffer.size > 0)) {
      const buffer = this.buffer ??= new ConnectionBuffer(this.capacity)
      if (!buffer.offer(event)) return this.close("overflow")
      bufferDepth.unsafeUpdate(buffer.size, [])
      return
    }
    if (!this.write(event)) this.block()
  }

  /** The client is backed up: what comes next waits in the buffer until it reads again. */
  private block(): void {
    this.blocked = true
    this.transport.whenDrained(() => this.flush(), () => this.stalled())
  }

  lost(): void {
    this.close("stream_lost")
  }

  /** Writes one event unless already sent; false when the client is now backed up. */
  write(event: StreamEvent): boolean {
    if (event.seq <= this.lastSeq) return true
    this.lastSeq = event.seq
    const taskId = this.admission.request.taskId
    if (taskId !== undefined && event.payload.task_id !== taskId) return true
    return this.transport.send(event)
  }

  /** Sends what waited in the buffer, until the client backs up again. */
  flush(): void {
    this.blocked = false
    if (this.buffer === undefined) return
    const waiting = this.buffer.takeAll()
    for (let i = 0; i < waiting.length; i++) {
      if (this.closed) return
      if (!this.write(waiting[i]!)) {
        for (let j = i + 1; j < waiting.length; j++) this.buffer.offer(waiting[j]!)
        return this.block()
      }
    }
    if (this.buffer.size === 0) this.buffer = undefined
  }

  stalled(): void {
    this.close("stalled")
  }

  goLive(): void {
    this.live = true
    this.flush()
  }

  close(reason: CloseReason): void {
    if (this.closed) return
    this.closed = true
    if (reason === "overflow" || reason === "stalled") {
      cuts[reason].unsafeUpdate(1, [])
      this.stats.slowClientDisconnects++
    }
    this.transport.close(reason)
  }

  /** The transport's close path (the client is gone, or the stream never opened): idempotent. */
  readonly gone_ = (): void => {
    if (this.gone) return
    this.gone = true
    this.closed = true
    this.stats.open--
    this.admission.release()
    this.following?.leave()
  }
}

interface GatewayStats {
  readonly capacity: number
  open: number
  opened: number
  slowClientDisconnects: number
  resets: number
}

export class EventGateway extends Effect.Service<EventGateway>()("EventGateway", {
  effect: Effect.gen(function*() {
    const log = yield* EventLog
    const feeds = yield* ProjectFeeds
    const limits = yield* ConnectionLimits
    const { connectionBuffer: capacity } = yield* StreamSettings.config
    const stats: GatewayStats = { capacity, open: 0, opened: 0, slowClientDisconnects: 0, resets: 0 }

    /**
     * One pass over PostgreSQL from the connection's position to the stream's end, with backpressure. Sequences
     * are gap-free, so a missing one means retention took it meanwhile: the pass stops with "expired". So does a
     * pass that ends short of `target` (events the feed had delivered, so committed, that are no longer stored).
     */
    const replayPass = (conn: Connection, projectId: string, target: number) =>
      log.replay(projectId, conn.lastSeq).pipe(
        Stream.takeWhile(() => !conn.closed),
        Stream.runForEach((event) => {
          if (event.seq > conn.lastSeq + 1) return Effect.fail("expired" as const)
          return conn.write(event)
            ? Effect.void
            : Effect.async<void>((resume) =>
              conn.transport.whenDrained(() => resume(Effect.void), () => {
                conn.stalled()
                resume(Effect.void)
              })
            )
        }),
        Effect.zipRight(
          Effect.suspend(() => !conn.closed && conn.lastSeq < target ? Effect.fail("expired" as const) : Effect.void)
        )
      )

    /**
     * Replays until the connection has everything the feed has delivered, then goes live in the same synchronous
     * step (no feed event can come in between). A stream that keeps moving faster than the passes catch up is
     * handed over the classic way: the feed's events are held in the buffer during one last pass.
     */
    const catchUp = (conn: Connection, projectId: string, feedSeq: () => number) =>
      Effect.gen(function*() {
        for (let pass = 1; !conn.closed; pass++) {
          if (pass > 3) conn.holding = true
          yield* replayPass(conn, projectId, feedSeq())
          const caughtUp = yield* Effect.sync(() => {
            if (conn.closed || (conn.lastSeq < feedSeq() && !conn.holding)) return false
            conn.goLive()
            return true
          })
          if (caughtUp) return
        }
      })

    const notFound = (request: StreamRequest) => Effect.fail(new ProjectNotFound({ projectId: request.projectId }))

    /**
     * Where the project's stream stands, for `request`'s tenant. Read from the project's running feed when there is
     * one (no I/O: most opens of a reconnect storm find their feed), else by starting it. A cursor the feed's view
     * cannot serve is checked against PostgreSQL before anyone is told to reset: the feed may be a moment behind
     * another runner whose cursor the client brings.
     */
    const headOf = (request: StreamRequest): Effect.Effect<StreamHead, ProjectNotFound | StorageUnavailable> => {
      const view = feeds.peek(request.projectId)
      if (view === undefined) {
        return Effect.flatMap(feeds.head(request.tenantId, request.projectId), (head) =>
          Option.isNone(head)
            ? notFound(request)
            : Effect.succeed({ epoch: head.value.epoch, lastSeq: head.value.seq, retainedSeq: head.value.retainedSeq }))
      }
      if (view.tenantId !== request.tenantId) return notFound(request)
      const head: StreamHead = { epoch: view.epoch, lastSeq: view.seq, retainedSeq: view.retainedSeq }
      if (request.after === undefined || checkCursor(head, request.after) === null) return Effect.succeed(head)
      return Effect.flatMap(
        log.open(request.tenantId, request.projectId),
        (stored) => Option.isNone(stored) ? notFound(request) : Effect.succeed(stored.value)
      )
    }

    /**
     * Admits an authenticated client before anything is sent to it, then runs `use` (an upgrade, `open`): the project
     * exists for its tenant (else ProjectNotFound) and the user and tenant are within their stream limits (else
     * TooManyConnections). A WebSocket is admitted before its upgrade, so a refusal is a plain HTTP answer (404, 429
     * with Retry-After) as for SSE. The place taken in the limits is given back if `use` fails or is interrupted
     * (the client left mid-upgrade); once `use` succeeds it belongs to the opened stream.
     */
    const admit = <A, E, R>(request: StreamRequest, use: (admission: Admission) => Effect.Effect<A, E, R>) =>
      Effect.flatMap(headOf(request), (head): Effect.Effect<A, E | TooManyConnections, R> => {
        const release = limits.tryAdmit(request.tenantId, request.userId)
        if (release instanceof TooManyConnections) return Effect.fail(release)
        return Effect.onExit(
          use({ request, head, release }),
          (exit) => Exit.isFailure(exit) ? Effect.sync(release) : Effect.void
        )
      })

    /**
     * Opens an admitted stream: resets a cursor that cannot be served, follows the project's feed first, replays
     * from PostgreSQL up to (at least) where the feed stands, then goes live. A client whose cursor is where the feed
     * stands (or that brings none) goes live at once, with no query. Returns the function the transport calls when
     * the client is gone. No span: it runs once per stream open (≤ 2 ms of CPU each in a reconnect storm).
     */
    const open = (admission: Admission, transport: Transport) =>
      Effect.suspend(() => {
        const { request } = admission
        stats.open++
        stats.opened++
        const conn = new Connection(transport, admission, stats)
        transport.open()
        const current = admission.head
        const problem = request.after === undefined ? null : checkCursor(current, request.after)
        if (problem !== null) {
          stats.resets++
          resetCount(problem)
          transport.reset(problem, new EventCursor({ epoch: current.epoch, seq: current.lastSeq }).toString())
        }
        conn.lastSeq = request.after === undefined || problem !== null ? current.lastSeq : request.after.seq
        return feeds.follow(request.tenantId, request.projectId, conn).pipe(
          Effect.flatMap((followed): Effect.Effect<void, StorageUnavailable> => {
            if (Option.isNone(followed) || conn.gone) {
              followed.pipe(Option.map((f) => f.leave()))
              return Effect.sync(() => conn.close("stream_lost"))
            }
            const following = conn.following = followed.value
            if (following.epoch !== current.epoch) return Effect.sync(() => conn.close("stream_lost"))
            if (conn.lastSeq >= following.current()) return Effect.sync(() => conn.goLive())
            return catchUp(conn, request.projectId, () => following.current()).pipe(
              // retention took events the client still needed: reset, and go on from where the feed stands (a database
              // failure fails the open: the transport cuts the stream, and the client resumes by cursor)
              Effect.catchIf((e): e is "expired" => e === "expired", () =>
                Effect.sync(() => {
                  stats.resets++
                  resetCount("expired")
                  const at = following.current()
                  transport.reset("expired", new EventCursor({ epoch: current.epoch, seq: at }).toString())
                  conn.lastSeq = at
                  conn.buffer = undefined
                  conn.goLive()
                }))
            )
          }),
          Effect.onError(() => Effect.sync(conn.gone_)),
          Effect.as(conn.gone_)
        )
      })

    /** Admits and opens in one step (SSE: its refusals are plain HTTP answers anyway). */
    const connect = (request: StreamRequest, transport: Transport) =>
      admit(request, (admission) => open(admission, transport))

    return { admit, open, connect, stats: Effect.sync(() => ({ ...stats })) } as const
  })
}) {}
