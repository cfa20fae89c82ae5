/**
 * Plain code on the delivery path (no Effect): one buffer per open connection, touched on every event, so it holds
 * nothing but an array (the gateway classes and the raw routes stand outside Effect for their memory: RawRoutes.ts).
 */
import type { StreamEvent } from "../persistence/EventLog.js"

/** Same task, same event type, status and stage: the later one says everything the earlier one did. */
const supersedes = (later: StreamEvent, earlier: StreamEvent) =>
  later.payload.task_id === earlier.payload.task_id && later.type === earlier.type &&
  later.payload.status === earlier.payload.status && later.payload.stage === earlier.payload.stage

/**
 * What one connection holds while its client is not reading, or while it replays (seed 12.7.11): at most
 * `capacity` events. While there is room every event is kept, so a client that keeps up sees every version.
 * When full, progress is coalesced per task: an update superseded by a later queued update of the same task in
 * the same status and stage is dropped (latest wins; the later one keeps its place, so cursors stay in order on
 * the wire). A change of status or stage is never merged away: when nothing can be dropped, `offer` says so and
 * the connection is closed, so the client resumes by cursor instead of missing it.
 */
export class ConnectionBuffer {
  private items: Array<StreamEvent> = []

  constructor(readonly capacity: number) {}

  get size(): number {
    return this.items.length
  }

  /** What is queued, in order (a copy). */
  toArray(): Array<StreamEvent> {
    return [...this.items]
  }

  /** Queues `event`; false when it fits nowhere even after coalescing (the connection must close). */
  offer(event: StreamEvent): boolean {
    if (this.items.length >= this.capacity) this.compact(event)
    if (this.items.length >= this.capacity) return false
    this.items.push(event)
    return true
  }

  /** Drops every queued update that a later one (queued, or `next`) of its task supersedes. */
  private compact(next: StreamEvent): void {
    const latest = new Map<string, StreamEvent>([[next.payload.task_id, next]])
    const kept: Array<StreamEvent> = []
    for (let i = this.items.length - 1; i >= 0; i--) {
      const item = this.items[i]!
      const later = latest.get(item.payload.task_id)
      latest.set(item.payload.task_id, item)
      if (later !== undefined && supersedes(later, item)) {
        latest.set(item.payload.task_id, later) // the later one still stands for the run
        continue
      }
      kept.push(item)
    }
    this.items = kept.reverse()
  }

  /** Everything queued, in order, leaving the buffer empty. */
  takeAll(): Array<StreamEvent> {
    const all = this.items
    this.items = []
    return all
  }
}
