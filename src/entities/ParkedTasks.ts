import { Clock, Duration, Effect, Metric } from "effect"
import type { QuotaScope } from "../quota/ProviderQuota.js"

/** A task whose entity went idle: when its next poll is due, and whose quota that poll takes. */
export interface Parked {
  readonly dueAt: number
  readonly scope: QuotaScope
}

/** Sends a woken task its Start, with the quota slot taken for its next poll; false if it was not delivered. */
export type Wake = (taskId: string) => Effect.Effect<boolean>

export const tasksParked = Metric.gauge("tasks_parked", {
  description: "polling tasks on this runner whose entity went idle, waiting in memory for their next poll"
})

export const plainWakesSkipped = Metric.counter("tasks_plain_wakes_skipped_total", {
  description: "Starts without a quota slot (the sweeper's, a resume) left unanswered because this runner holds the " +
    "task parked: its own wake comes with its slot",
  incremental: true
})

/**
 * How long an entry vouches for its task (`holds`): past its due time, or in the quota's line, for longer than this
 * it no longer does, so a plain wake (the sweeper's) drives the task again. Only a wake loop that stopped leaves an
 * entry that old with a slot that never came: the sweeper stays the safety net for it.
 */
const VOUCHES_FOR_MS = 5 * 60_000

/**
 * The runner's idle polling tasks (seed 12.8: a task waiting longer than TASK_IDLE_AFTER for its next poll lets its
 * entity go). One small entry per task (its due time and quota scope, ~100 bytes) instead of an entity, a fiber and
 * a timer (tens of KiB). `run` wakes them: every tick, those due within `lead` go in the provider quota's line, in
 * order of due time, each as a small fiber that sends Start only once its slot is granted: a task waiting for its
 * quota waits here (~1 KiB), not as an entity. Entries are filled by entities going idle and, on a shard acquired
 * by this runner, from next_poll_at in PostgreSQL (ResumeOnAcquire.ts).
 */
export const makeParkedTasks = () => {
  const parked = new Map<string, Parked>()
  /**
   * Tasks taken out of `parked` and in line for a quota slot, with when they joined it; unpark removes them, and the
   * taker skips them.
   */
  const queued = new Map<string, number>()

  const park = (taskId: string, entry: Parked) => {
    parked.set(taskId, entry)
    queued.delete(taskId)
  }
  /**
   * Whether this runner has the task in hand: parked until its next poll, or in the quota's line for it (joined
   * within VOUCHES_FOR_MS). A Start without a slot then leaves the entity idle: at 10,000 tasks under a provider
   * quota the polls come late by design, the sweeper took them for lost, and each of its Starts built an entity that
   * asked for a slot, lost its place in the line and parked again, at the back (bench:polling).
   */
  const holds = (taskId: string, now: number) => {
    const since = queued.get(taskId)
    if (since !== undefined) return now - since < VOUCHES_FOR_MS
    const entry = parked.get(taskId)
    return entry !== undefined && now - entry.dueAt < VOUCHES_FOR_MS
  }
  /** The task's entity is awake again (a webhook, a cancel, a wake): no wake is due for it. */
  const unpark = (taskId: string) => {
    parked.delete(taskId)
    queued.delete(taskId)
  }

  /**
   * Wakes parked tasks until interrupted: every `tick` those due within `lead` wait for their quota slot
   * (`acquire`), then are sent Start with the slot. `stillHere` drops tasks whose shard
   * this runner no longer holds (their new owner wakes them from next_poll_at).
   */
  const run = (options: {
    readonly tick: Duration.Duration
    readonly lead: Duration.Duration
    readonly acquire: (scope: QuotaScope) => Effect.Effect<void>
    readonly wake: Wake
    readonly stillHere: (taskId: string) => boolean
  }) =>
    Effect.gen(function*() {
      const leadMs = Duration.toMillis(options.lead)
      const scope = yield* Effect.scope
      /** One due task: a small fiber waits in the quota's line for it (first come, first served), then wakes it. */
      const wakeWithSlot = (taskId: string, entry: Parked) =>
        Effect.gen(function*() {
          if (!options.stillHere(taskId)) return void queued.delete(taskId)
          yield* options.acquire(entry.scope)
          // woken meanwhile by a webhook or a cancel: its entity took its own slot, and this one is spent
          if (!queued.delete(taskId)) return
          if (yield* options.wake(taskId)) return
          // not delivered (the shard moving, the runner stopping): looked at again in a second
          const now = yield* Clock.currentTimeMillis
          if (!parked.has(taskId)) parked.set(taskId, { dueAt: now + 1000, scope: entry.scope })
        })
      const look = Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const due: Array<[string, Parked]> = []
        for (const entry of parked) if (entry[1].dueAt - leadMs <= now) due.push(entry)
        due.sort((a, b) => a[1].dueAt - b[1].dueAt)
        for (const [taskId, entry] of due) {
          parked.delete(taskId)
          queued.set(taskId, now)
          yield* Effect.forkIn(wakeWithSlot(taskId, entry), scope)
        }
        yield* Metric.set(tasksParked, parked.size + queued.size)
      })
      yield* look.pipe(Effect.zipRight(Effect.sleep(options.tick)), Effect.forever)
    }).pipe(Effect.scoped)

  return { park, unpark, holds, run, size: () => parked.size + queued.size } as const
}

export type ParkedTasks = ReturnType<typeof makeParkedTasks>
