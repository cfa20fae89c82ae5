import type { StreamEvent } from "../persistence/EventLog.js"

/**
 * What one connection holds while its client is not reading (seed 12.7.11): at most `capacity` events. A
 * progress-only update supersedes the queued update of the same task in the same status and stage (latest
 * wins; it moves to the end, so cursors stay in order on the wire). A change of status or stage is never
 * merged away: when one does not fit, `offer` says so and the connection is closed, so the client resumes by
 * cursor instead of missing it.
 */
export class ConnectionBuffer {
  private items: Array<StreamEvent> = []

  constructor(readonly capacity: number) {}

  get size(): number {
    return this.items.length
  }

  /** Queues `event`; false when it fits nowhere (the connection must close). */
  offer(event: StreamEvent): boolean {
    const taskId = event.payload.task_id
    for (let i = this.items.length - 1; i >= 0; i--) {
      const queued = this.items[i]!
      if (queued.payload.task_id !== taskId) continue
      if (
        queued.type === event.type && queued.payload.status === event.payload.status &&
        queued.payload.stage === event.payload.stage && queued.payload.task_version < event.payload.task_version
      ) {
        this.items.splice(i, 1)
        this.items.push(event)
        return true
      }
      break // only the task's latest queued update may be superseded
    }
    if (this.items.length >= this.capacity) return false
    this.items.push(event)
    return true
  }

  /** Everything queued, in order, leaving the buffer empty. */
  takeAll(): Array<StreamEvent> {
    const all = this.items
    this.items = []
    return all
  }
}
