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

export const tasksInQuotaLine = Metric.gauge("tasks_in_quota_line", {
  description: "parked tasks on this runner whose poll is due, waiting for a provider quota slot"
})

export const plainWakesSkipped = Metric.counter("tasks_plain_wakes_skipped_total", {
  description: "Starts without a quota slot (the sweeper's, a resume) left unanswered because this runner holds the " +
    "task parked: its own wake comes with its slot",
  incremental: true
})

/** A scope's due tasks waiting for their quota slots (ParkedTasks.run). */
interface Line {
  readonly scope: QuotaScope
  /** task ids with the token of their place (a task that left the line and joined it again holds only its last) */
  entries: Array<readonly [string, number]>
  head: number
  workers: number
}

/**
 * Fibers per quota scope taking slots for due tasks: each holds one reservation at a time, so this many slots are
 * asked for at once. A scope's rate is at most this many over the time a worker spends per slot besides its wait
 * (two Redis round trips behind the runner's other work), and a slot not asked for in time is lost for good (GCRA):
 * 16 at a 200/s quota allowed 80 ms, which a busy runner exceeded (bench:polling: 189–193/s, 5–6 of 8 5 s buckets
 * within ±5%); 64 allow 320 ms (199/s, 8 of 8).
 */
const WORKERS_PER_SCOPE = 64
/**
 * Starts sent with a slot and not answered yet, on the whole runner: a slow runner is not sent more and more. Above
 * a second of a 200/s quota, so that a stall of the runner's event loop does not hold the workers back too (with 64:
 * one 5 s bucket at 184/s after a 0.7 s stall).
 */
const WAKES_IN_FLIGHT = 256

/**
 * How long an entry vouches for its task (`holds`): past its due time, or in the quota's line, for longer than this
 * it no longer does, so a plain wake (the sweeper's) drives the task again. Only a wake loop that stopped leaves an
 * entry that old with a slot that never came: the sweeper stays the safety net for it.
 */
const VOUCHES_FOR_MS = 5 * 60_000

/**
 * The runner's idle polling tasks (seed 12.8: a task waiting longer than TASK_IDLE_AFTER for its next poll lets its
 * entity go). One small entry per task (its due time and quota scope, ~100 bytes) instead of an entity, a fiber and
 * a timer (tens of KiB). `run` wakes them: every tick, those due within `lead` join their quota scope's line, in
 * order of due time, and a few workers per scope take slots for them one by one, sending each its Start once its slot
 * is granted: a task waiting for its quota waits here as an entry, not as an entity nor a fiber. While a scope's line
 * is not empty, a task that just polled parks at once (`backlogged`: TaskLifecycle.ts). Entries are filled by entities
 * going idle and, on a shard acquired by this runner, from next_poll_at in PostgreSQL (ResumeOnAcquire.ts).
 */
export const makeParkedTasks = () => {
  const parked = new Map<string, Parked>()
  /**
   * Tasks taken out of `parked` and in line for a quota slot, with when they joined it and the token of their place
   * in it; unpark removes them, and the workers skip them.
   */
  const queued = new Map<string, { readonly since: number; readonly token: number }>()
  /** Tasks a worker took a slot for, whose Start is on its way: still in hand (an entity built for it waits for it). */
  const delivering = new Set<string>()
  let tokens = 0

  const park = (taskId: string, entry: Parked) => {
    parked.set(taskId, entry)
    queued.delete(taskId)
    delivering.delete(taskId)
  }
  /**
   * Whether this runner has the task in hand: parked until its next poll, or in the quota's line for it (joined
   * within VOUCHES_FOR_MS). A Start without a slot then leaves the entity idle: at 10,000 tasks under a provider
   * quota the polls come late by design, the sweeper took them for lost, and each of its Starts built an entity that
   * asked for a slot, lost its place in the line and parked again, at the back (bench:polling).
   */
  const holds = (taskId: string, now: number) => {
    if (delivering.has(taskId)) return true
    const since = queued.get(taskId)?.since
    if (since !== undefined) return now - since < VOUCHES_FOR_MS
    const entry = parked.get(taskId)
    return entry !== undefined && now - entry.dueAt < VOUCHES_FOR_MS
  }
  /** The task's entity is awake again (a webhook, a cancel, a wake): no wake is due for it. */
  const unpark = (taskId: string) => {
    parked.delete(taskId)
    queued.delete(taskId)
    delivering.delete(taskId)
  }
  /** A worker took a slot for this task and its Start (with the slot) is on its way. */
  const isDelivering = (taskId: string) => delivering.has(taskId)

  /**
   * The due tasks of each quota scope (provider and tenant), in order of due time, waiting for one of the scope's
   * workers to take a slot for them: plain entries, not a fiber each (a fiber waiting in the quota's line weighed
   * ~10 KiB, and at 10,000 tasks under a 200/s quota most of them wait there).
   */
  const lines = new Map<string, Line>()
  const scopeKey = (scope: QuotaScope) => `${scope.provider}\u0000${scope.tenantId}`
  /**
   * Whether due tasks of this scope wait here for a quota slot: the quota binds, so a task that just polled may as
   * well wait for its next turn parked (it would only wait for it awake, in the same line).
   */
  const backlogged = (scope: QuotaScope) => {
    const line = lines.get(scopeKey(scope))
    return line !== undefined && line.head < line.entries.length
  }

  /**
   * Wakes parked tasks until interrupted: every `tick` those due within `lead` join their scope's line, in order of
   * due time. Up to `workers` fibers per scope each take the line's next task, wait for its quota slot (`acquire`),
   * then send it Start with the slot (at most `wakes` in flight on the runner). `stillHere` drops tasks whose shard
   * this runner no longer holds (their new owner wakes them from next_poll_at).
   */
  const run = (options: {
    readonly tick: Duration.Duration
    readonly lead: Duration.Duration
    readonly acquire: (scope: QuotaScope) => Effect.Effect<void>
    readonly wake: Wake
    readonly stillHere: (taskId: string) => boolean
    readonly workers?: number
    readonly wakes?: number
  }) =>
    Effect.gen(function*() {
      const leadMs = Duration.toMillis(options.lead)
      const perScope = options.workers ?? WORKERS_PER_SCOPE
      const inFlight = yield* Effect.makeSemaphore(options.wakes ?? WAKES_IN_FLIGHT)
      const scope = yield* Effect.scope
      /**
       * Sends a task with its slot its Start. It is `delivering` meanwhile, so that an entity built for that Start
       * leaves its first poll to the Start's slot (holds). Not delivered (the shard moving, the runner stopping), and
       * not woken nor parked otherwise meanwhile: looked at again in a second.
       */
      const deliver = (taskId: string, quotaScope: QuotaScope) =>
        Effect.gen(function*() {
          const delivered = yield* options.wake(taskId)
          const now = yield* Clock.currentTimeMillis
          if (delivering.delete(taskId) && !delivered && !parked.has(taskId) && !queued.has(taskId)) {
            parked.set(taskId, { dueAt: now + 1000, scope: quotaScope })
          }
        })
      /** One of a scope's workers: takes the line's tasks one by one (first come, first served) until it is empty. */
      const worker = (key: string, line: Line) =>
        Effect.gen(function*() {
          while (line.head < line.entries.length) {
            const [taskId, token] = line.entries[line.head++]!
            if (line.head >= 1024 && line.head * 2 >= line.entries.length) {
              line.entries = line.entries.slice(line.head)
              line.head = 0
            }
            // woken meanwhile by a webhook or a cancel (its entity took its own slot), or in line again further on
            if (queued.get(taskId)?.token !== token) continue
            if (!options.stillHere(taskId)) {
              queued.delete(taskId)
              continue
            }
            yield* options.acquire(line.scope)
            // woken while it waited for the slot: the slot is spent
            if (queued.get(taskId)?.token !== token) continue
            queued.delete(taskId)
            delivering.add(taskId)
            yield* inFlight.take(1)
            yield* deliver(taskId, line.scope).pipe(Effect.ensuring(inFlight.release(1)), Effect.forkIn(scope))
          }
        }).pipe(Effect.ensuring(Effect.sync(() => {
          line.workers--
          if (line.workers === 0 && line.head >= line.entries.length) lines.delete(key)
        })))
      const look = Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const due: Array<[string, Parked]> = []
        for (const entry of parked) if (entry[1].dueAt - leadMs <= now) due.push(entry)
        due.sort((a, b) => a[1].dueAt - b[1].dueAt)
        for (const [taskId, entry] of due) {
          parked.delete(taskId)
          const token = ++tokens
          queued.set(taskId, { since: now, token })
          const key = scopeKey(entry.scope)
          let line = lines.get(key)
          if (line === undefined) lines.set(key, line = { scope: entry.scope, entries: [], head: 0, workers: 0 })
          line.entries.push([taskId, token])
        }
        for (const [key, line] of lines) {
          while (line.workers < perScope && line.workers < line.entries.length - line.head) {
            line.workers++
            yield* Effect.forkIn(worker(key, line), scope)
          }
        }
        yield* Metric.set(tasksParked, parked.size + queued.size + delivering.size)
        yield* Metric.set(tasksInQuotaLine, queued.size)
      })
      yield* look.pipe(Effect.zipRight(Effect.sleep(options.tick)), Effect.forever)
    }).pipe(Effect.scoped)

  return {
    park,
    unpark,
    holds,
    isDelivering,
    backlogged,
    run,
    size: () => parked.size + queued.size + delivering.size
  } as const
}

export type ParkedTasks = ReturnType<typeof makeParkedTasks>
