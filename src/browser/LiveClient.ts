/**
 * The browser side of task delivery (seed 12.6.3, 12.12.4), without a framework: a snapshot, then an EventSource
 * from the snapshot's cursor; only a greater task_version replaces what is shown; reconnects with exponential
 * backoff and full jitter (no reconnect storm when a gateway comes back); after repeated failures it polls
 * snapshots every 10–30 s ("live updates paused") while it keeps trying, and resumes by cursor.
 */
import { backoffMillis } from "../domain/backoff.js"

export interface TaskState {
  readonly task_id: string
  readonly task_version: number
  readonly status: string
  readonly stage: string
  readonly progress: number | null
  readonly asset_id: string | null
  readonly error_code: string | null
}

export type ConnectionState = "connecting" | "live" | "reconnecting" | "paused"

export interface LiveClientOptions {
  readonly project: string
  readonly baseUrl?: string
  /** spend a single-use stream token per connection instead of relying on the session cookie */
  readonly streamTokens?: boolean
  readonly onTasks: (changed: ReadonlyArray<TaskState>) => void
  readonly onConnection: (state: ConnectionState) => void
  readonly failuresBeforePolling?: number
  readonly backoffBaseMs?: number
  readonly backoffMaxMs?: number
  readonly pollMinMs?: number
  readonly pollMaxMs?: number
}

interface TaskPage {
  readonly tasks: ReadonlyArray<TaskState>
  readonly cursor: string
  readonly next_before: string | null
}

const SNAPSHOT_LIMIT = 200

export class LiveClient {
  readonly tasks = new Map<string, TaskState>()
  /** every task_version received from the stream, per task (what the live page shows and the tests check) */
  readonly received = new Map<string, Array<number>>()
  cursor: string | null = null
  resets = 0
  connections = 0
  private source: EventSource | null = null
  private failures = 0
  private retryTimer: ReturnType<typeof setTimeout> | undefined
  private pollTimer: ReturnType<typeof setTimeout> | undefined
  private stopped = false
  private readonly base: string

  constructor(private readonly options: LiveClientOptions) {
    this.base = options.baseUrl ?? ""
  }

  async start(): Promise<void> {
    this.options.onConnection("connecting")
    await this.snapshotUntilDone(true)
    this.connect()
  }

  /** A snapshot the client cannot do without (first load, after a reset): retried with backoff until it works. */
  private async snapshotUntilDone(takeCursor: boolean): Promise<void> {
    for (let attempt = 0; !this.stopped; attempt++) {
      try {
        return await this.snapshot(takeCursor)
      } catch {
        await new Promise((r) => setTimeout(r, backoffMillis(attempt, { baseMs: 500, capMs: 30_000 })))
      }
    }
  }

  stop(): void {
    this.stopped = true
    this.source?.close()
    clearTimeout(this.retryTimer)
    clearTimeout(this.pollTimer)
  }

  /** Applies tasks, keeping only versions greater than the ones shown. */
  apply(states: ReadonlyArray<TaskState>): void {
    const changed: Array<TaskState> = []
    for (const state of states) {
      const current = this.tasks.get(state.task_id)
      if (current !== undefined && current.task_version >= state.task_version) continue
      this.tasks.set(state.task_id, state)
      changed.push(state)
    }
    if (changed.length > 0) this.options.onTasks(changed)
  }

  /**
   * Reads the project's newest tasks. `takeCursor`: follow from the snapshot's cursor — only when the page holds
   * every task, or nothing older could have been missed (first load).
   */
  async snapshot(takeCursor: boolean): Promise<void> {
    const res = await fetch(`${this.base}/v1/projects/${this.options.project}/tasks?limit=${SNAPSHOT_LIMIT}`, {
      credentials: "same-origin"
    })
    if (!res.ok) throw new Error(`snapshot: ${res.status}`)
    const page = (await res.json()) as TaskPage
    this.apply(page.tasks)
    if (this.cursor === null || (takeCursor && page.next_before === null)) this.cursor = page.cursor
  }

  private async streamUrl(): Promise<string> {
    const params = new URLSearchParams()
    if (this.cursor !== null) params.set("after", this.cursor)
    if (this.options.streamTokens === true) {
      const res = await fetch(`${this.base}/v1/projects/${this.options.project}/stream-tokens`, {
        method: "POST",
        credentials: "same-origin"
      })
      if (!res.ok) throw new Error(`stream token: ${res.status}`)
      params.set("stream_token", ((await res.json()) as { token: string }).token)
    }
    return `${this.base}/v1/projects/${this.options.project}/events?${params}`
  }

  private connect(): void {
    if (this.stopped) return
    this.streamUrl().then((url) => {
      if (this.stopped) return
      const source = new EventSource(url)
      this.source = source
      source.onopen = () => {
        this.connections++
        this.failures = 0
        clearTimeout(this.pollTimer)
        this.pollTimer = undefined
        this.options.onConnection("live")
      }
      source.addEventListener("task.status", (e) => {
        const state = JSON.parse((e as MessageEvent<string>).data) as TaskState
        this.cursor = (e as MessageEvent<string>).lastEventId
        const seen = this.received.get(state.task_id) ?? []
        seen.push(state.task_version)
        this.received.set(state.task_id, seen)
        this.apply([state])
      })
      source.addEventListener("reset", (e) => {
        // the cursor cannot be served: the stream goes on from its head, and a new snapshot covers the rest
        this.resets++
        this.cursor = (JSON.parse((e as MessageEvent<string>).data) as { cursor: string }).cursor
        void this.snapshotUntilDone(false)
      })
      source.addEventListener("mode", () => {
        // the operators paused live pushes (DEGRADED_NOTIFY): poll snapshots now, and keep trying the stream (it is
        // refused with 503 until pushes resume), resuming by cursor when it opens
        source.close()
        if (this.pollTimer === undefined) this.startPolling()
        this.retry()
      })
      source.onerror = () => {
        // EventSource would retry at a fixed interval by itself: close it and back off with jitter instead
        source.close()
        this.retry()
      }
    }, () => this.retry())
  }

  private retry(): void {
    if (this.stopped) return
    this.failures++
    const limit = this.options.failuresBeforePolling ?? 3
    if (this.failures >= limit && this.pollTimer === undefined) this.startPolling()
    this.options.onConnection(this.pollTimer === undefined ? "reconnecting" : "paused")
    const base = this.options.backoffBaseMs ?? 500
    const max = this.options.backoffMaxMs ?? 30_000
    const delay = backoffMillis(this.failures, { baseMs: base, capMs: max })
    clearTimeout(this.retryTimer)
    this.retryTimer = setTimeout(() => this.connect(), delay)
  }

  private startPolling(): void {
    const min = this.options.pollMinMs ?? 10_000
    const max = this.options.pollMaxMs ?? 30_000
    const poll = () => {
      this.pollTimer = setTimeout(() => {
        this.snapshot(false).catch(() => undefined).finally(() => this.pollTimer !== undefined && poll())
      }, min + Math.random() * (max - min))
    }
    poll()
  }
}
