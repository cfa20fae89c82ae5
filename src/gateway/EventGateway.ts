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
import { ProjectNotFound } from "../schema/errors.js"
import type { ProjectId, TenantId, UserId } from "../schema/ids.js"
import { ConnectionBuffer } from "./ConnectionBuffer.js"
import { ConnectionLimits, type TooManyConnections } from "./ConnectionLimits.js"
import { type FeedListener, ProjectFeeds } from "./ProjectFeeds.js"
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
 * sent again, and it sends in cursor order, so the client's cursor (Last-Event-ID) is always gap-free.
 */
class Connection implements FeedListener {
  lastSeq = 0
  live = false
  holding = false
  blocked = false
  closed = false
  readonly buffer: ConnectionBuffer

  constructor(
    readonly transport: Transport,
    capacity: number,
    readonly taskId: string | undefined,
    readonly onOverflow: () => void
  ) {
    this.buffer = new ConnectionBuffer(capacity)
  }

  deliver(event: StreamEvent): void {
    if (this.closed || event.seq <= this.lastSeq) return
    // while replaying, the feed's events are read from PostgreSQL by the replay itself (it catches up with the
    // feed before going live); only the last catch-up holds them, if the replay could not catch up alone
    if (!this.live && !this.holding) return
    if (!this.live || this.blocked || this.buffer.size > 0) {
      if (!this.buffer.offer(event)) return this.close("overflow")
      bufferDepth.unsafeUpdate(this.buffer.size, [])
      return
    }
    if (!this.write(event)) this.block()
  }

  /** The client is backed up: what comes next waits in the buffer until it reads again. */
  private block(): void {
    this.blocked = true
    this.transport.whenDrained(this.flush, this.stalled)
  }

  lost(): void {
    this.close("stream_lost")
  }

  /** Writes one event unless already sent; false when the client is now backed up. */
  write(event: StreamEvent): boolean {
    if (event.seq <= this.lastSeq) return true
    this.lastSeq = event.seq
    if (this.taskId !== undefined && event.payload.task_id !== this.taskId) return true
    return this.transport.send(event)
  }

  /** Sends what waited in the buffer, until the client backs up again. */
  readonly flush = (): void => {
    this.blocked = false
    const waiting = this.buffer.takeAll()
    for (let i = 0; i < waiting.length; i++) {
      if (this.closed) return
      if (!this.write(waiting[i]!)) {
        for (let j = i + 1; j < waiting.length; j++) this.buffer.offer(waiting[j]!)
        return this.block()
      }
    }
  }

  readonly stalled = (): void => this.close("stalled")

  goLive(): void {
    this.live = true
    this.flush()
  }

  close(reason: CloseReason): void {
    if (this.closed) return
    this.closed = true
    if (reason === "overflow" || reason === "stalled") {
      cuts[reason].unsafeUpdate(1, [])
      this.onOverflow()
    }
    this.transport.close(reason)
  }
}

export class EventGateway extends Effect.Service<EventGateway>()("EventGateway", {
  effect: Effect.gen(function*() {
    const log = yield* EventLog
    const feeds = yield* ProjectFeeds
    const limits = yield* ConnectionLimits
    const { connectionBuffer: capacity } = yield* StreamSettings.config
    const stats = { open: 0, opened: 0, slowClientDisconnects: 0, resets: 0 }

    /**
     * One pass over PostgreSQL from the connection's position to the stream's end, with backpressure. Sequences
     * are gap-free, so a missing one means retention took it meanwhile: the pass stops with "expired".
     */
    const replayPass = (conn: Connection, projectId: string) =>
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
        })
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
          yield* replayPass(conn, projectId)
          const caughtUp = yield* Effect.sync(() => {
            if (conn.closed || (conn.lastSeq < feedSeq() && !conn.holding)) return false
            conn.goLive()
            return true
          })
          if (caughtUp) return
        }
      })

    /**
     * Admits an authenticated client before anything is sent to it, then runs `use` (an upgrade, `open`): the project
     * exists for its tenant (else ProjectNotFound) and the user and tenant are within their stream limits (else
     * TooManyConnections). A WebSocket is admitted before its upgrade, so a refusal is a plain HTTP answer (404, 429
     * with Retry-After) as for SSE. The place taken in the limits is given back if `use` fails or is interrupted
     * (the client left mid-upgrade); once `use` succeeds it belongs to the opened stream.
     */
    const admit = <A, E, R>(request: StreamRequest, use: (admission: Admission) => Effect.Effect<A, E, R>) =>
      Effect.flatMap(log.open(request.tenantId, request.projectId), (head): Effect.Effect<
        A,
        E | ProjectNotFound | TooManyConnections,
        R
      > =>
        Option.isNone(head)
          ? Effect.fail(new ProjectNotFound({ projectId: request.projectId }))
          : Effect.acquireUseRelease(
            limits.admit(request.tenantId, request.userId),
            (release) => use({ request, head: head.value, release }),
            (release, exit) => Exit.isFailure(exit) ? Effect.sync(release) : Effect.void
          ))

    /**
     * Opens an admitted stream: resets a cursor that cannot be served, follows the project's feed first, replays
     * from PostgreSQL up to (at least) where the feed stands, then goes live. Returns the function the transport
     * calls when the client is gone.
     */
    const open = Effect.fn("EventGateway.open")(function*(admission: Admission, transport: Transport) {
      const { release, request } = admission
      let leave: Effect.Effect<void> = Effect.void
      stats.open++
      stats.opened++
      const conn = new Connection(transport, capacity, request.taskId, () => stats.slowClientDisconnects++)
      let gone = false
      const closed = Effect.suspend(() => {
        if (gone) return Effect.void
        gone = true
        conn.closed = true
        stats.open--
        release()
        return leave
      })

      const run = Effect.gen(function*() {
        transport.open()
        const current = admission.head
        const headCursor = new EventCursor({ epoch: current.epoch, seq: current.lastSeq }).toString()
        const problem = request.after === undefined ? null : checkCursor(current, request.after)
        if (problem !== null) {
          stats.resets++
          resetCount(problem)
          transport.reset(problem, headCursor)
        }
        conn.lastSeq = request.after === undefined || problem !== null ? current.lastSeq : request.after.seq
        const followed = yield* feeds.follow(request.projectId, conn)
        leave = followed.leave
        if (followed.epoch !== current.epoch) return conn.close("stream_lost")
        yield* catchUp(conn, request.projectId, followed.current).pipe(
          // retention took events the client still needed: reset, and go on from where the feed stands
          Effect.catchAll(() =>
            Effect.sync(() => {
              stats.resets++
              resetCount("expired")
              const at = followed.current()
              transport.reset("expired", new EventCursor({ epoch: current.epoch, seq: at }).toString())
              conn.lastSeq = at
              conn.buffer.takeAll()
              conn.goLive()
            })
          )
        )
      })
      yield* run.pipe(Effect.onError(() => closed))
      return closed
    })

    /** Admits and opens in one step (SSE: its refusals are plain HTTP answers anyway). */
    const connect = (request: StreamRequest, transport: Transport) =>
      admit(request, (admission) => open(admission, transport))

    return { admit, open, connect, stats: Effect.sync(() => ({ ...stats })) } as const
  })
}) {}
