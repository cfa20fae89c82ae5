import { SqlClient } from "@effect/sql"
import { Duration, Effect, Either, Layer, Metric, Schedule } from "effect"
import { backoffMillis } from "../domain/backoff.js"
import { TaskClient } from "../entities/TaskClient.js"
import { INBOX_CHANNEL } from "../persistence/channels.js"
import { isStorableText, storableText } from "../persistence/storableText.js"
import { runWakeLoop } from "../persistence/WakeLoop.js"
import { WriteFence } from "../persistence/WriteFence.js"
import { isTerminalReport, type ProviderReport, signsBody, unconfirmed } from "../providers/ProviderAdapter.js"
import { webhookProtocolOf } from "../providers/providers.js"
import type { AttemptId, ProviderName, TaskId } from "../schema/ids.js"
import { ProviderObservation } from "../schema/observation.js"
import { trusted } from "../schema/task.js"
import { resumedSpan, traced } from "../tracing/TraceId.js"
import { CallbackInbox } from "./CallbackInbox.js"
import { InboxSettings } from "./inboxSettings.js"

interface InboxRow {
  readonly id: number
  readonly provider: string
  readonly dedup_key: string
  readonly provider_event_id: string | null
  readonly provider_task_id: string | null
  readonly client_request_id: string | null
  readonly attempt_id: string | null
  readonly provider_occurred_at: Date | null
  readonly received_at: Date
  readonly payload_hash: Buffer
  readonly body: string | null
  readonly payload: unknown
  readonly retry_count: number
  readonly trace_id: string | null
}

/** Outcomes claimed by unsigned callbacks (Luma's), each confirmed by a provider query before it counts. */
const unsignedClaims = Metric.counter("unsigned_callback_claims_total", {
  description: "terminal states claimed by unsigned callbacks, sent to a provider query instead of applied"
})

/** Callbacks a write fence (a mode, an epoch bump, another active region) refused: put back, never counted. */
const fencedCallbacks = Metric.counter("inbox_fenced_total", {
  description: "callbacks whose task write was fenced (mode, epoch, region): retried later, not counted as failures"
})

/** Drains skipped whole because the mode forbids writes (READ_ONLY, MAINTENANCE): the rows wait, untouched. */
export const inboxDrainsPaused = Metric.counter("inbox_drains_paused_total", {
  description:
    "inbox drains skipped because the mode forbids writes: pending callbacks wait, untouched, for the window's end",
  incremental: true
})

/** The first field of a report whose text PostgreSQL cannot store (a NUL, a lone surrogate), if any. */
const unstorableField = (r: ProviderReport): string | undefined => {
  const texts: ReadonlyArray<readonly [string, string | null]> = [
    ["provider task id", r.providerTaskId],
    ["client request id", r.clientRequestId],
    ["event type", r.eventType],
    ["error code", r.errorCode],
    ...r.outputRefs.map((ref) => ["output reference", ref] as const)
  ]
  return texts.find(([, text]) => text !== null && !isStorableText(text))?.[0]
}

/** How soon a fenced row is tried again: the fence is re-read every second, so a few seconds is enough. */
const FENCED_RETRY_SECONDS = 2

/** Seconds a row that must wait waits before its next try: the one backoff from 1 s, capped. */
const backoffSeconds = (retry: number, capSeconds: number) =>
  backoffMillis(retry, { baseMs: 1000, capMs: capSeconds * 1000 }) / 1000

/**
 * Drains the callback inbox on every runner: claims due rows with FOR UPDATE SKIP LOCKED (a 30 s lease, so
 * a runner that dies mid-batch only delays its rows), maps each to its attempt, sends the observation to the
 * task's entity and marks it processed. A callback that beats the submit response (no attempt knows its
 * provider task id yet) is an orphan: retried with backoff, flagged after ORPHAN_FLAG_AFTER tries, never
 * dropped. A row that cannot be read is a poison row: dead letter, with the reason. A terminal state from an unsigned
 * callback (Luma's: only the URL token says who sent it) is not applied: it wakes a poll of that attempt.
 * LISTEN/NOTIFY wakes it at once; a sweep every INBOX_SWEEP_INTERVAL is the safety net.
 */
export const InboxProcessorLive = Layer.scopedDiscard(Effect.gen(function*() {
  const c = yield* InboxSettings.config
  // a runner can be a pure gateway (or a pure worker); every runner processes by default
  if (!c.processorEnabled) return
  const sql = yield* SqlClient.SqlClient
  const tasks = yield* TaskClient
  const fence = yield* WriteFence
  const { batchSize, maxRetries, orphanFlagAfter: flagAfter, sendTimeout, sweepInterval } = c

  const claim = sql<InboxRow>`
    UPDATE provider_callback_inbox i SET next_retry_at = now() + interval '30 seconds'
    FROM (
      SELECT id FROM provider_callback_inbox
      WHERE process_status IN ('pending', 'retry', 'orphan') AND next_retry_at <= now()
      ORDER BY next_retry_at, id
      LIMIT ${batchSize}
      FOR UPDATE SKIP LOCKED
    ) due
    WHERE i.id = due.id
    RETURNING i.id, i.provider, i.dedup_key, i.provider_event_id, i.provider_task_id, i.client_request_id,
      i.attempt_id, i.provider_occurred_at, i.received_at, i.payload_hash, i.body, i.payload, i.retry_count,
      i.trace_id`

  const markProcessed = (id: number) =>
    sql`UPDATE provider_callback_inbox SET process_status = 'processed', processed_at = now(), next_retry_at = NULL,
        last_error_code = NULL, last_error = NULL WHERE id = ${id}`
  // the reason may quote the provider's text (an id), which must not be what fails the write
  const markDead = (id: number, code: string, error: string) =>
    sql`UPDATE provider_callback_inbox SET process_status = 'dead', next_retry_at = NULL, last_error_code = ${code},
        last_error = ${storableText(error)} WHERE id = ${id}`
  // Fenced is not failing: the row waits for the fence to open (a mode, a bump being adopted) with its tries intact,
  // so no window, however long, turns a callback into a dead letter
  const fencedLater = (row: InboxRow) =>
    sql`UPDATE provider_callback_inbox SET process_status = 'retry', last_error_code = 'WriteFenced',
        next_retry_at = now() + make_interval(secs => ${FENCED_RETRY_SECONDS}) WHERE id = ${row.id}`
  const retryLater = (row: InboxRow, code: string, status: "retry" | "orphan", capSeconds: number) =>
    sql`UPDATE provider_callback_inbox SET process_status = ${status}, retry_count = retry_count + 1,
        next_retry_at = now() + make_interval(secs => ${backoffSeconds(row.retry_count, capSeconds)}),
        last_error_code = ${code} WHERE id = ${row.id}`

  /**
   * The attempt a callback belongs to. A URL-token callback names its attempt, and only that attempt of that
   * provider is eligible: the body (unsigned) cannot redirect it to another task. Signed callbacks map by the
   * provider's task id, else by our client_request_id.
   */
  const findAttempt = (row: InboxRow, report: ProviderReport) =>
    row.attempt_id !== null
      ? sql<{ attempt_id: string; task_id: string; provider_task_id: string | null }>`
          SELECT id AS attempt_id, task_id, provider_task_id FROM task_attempts
          WHERE id = ${row.attempt_id} AND provider = ${row.provider}`
      : sql<{ attempt_id: string; task_id: string; provider_task_id: string | null }>`
          SELECT id AS attempt_id, task_id, provider_task_id FROM task_attempts
          WHERE provider = ${row.provider}
            AND (provider_task_id = ${report.providerTaskId} OR client_request_id = ${report.clientRequestId})
          ORDER BY (provider_task_id = ${report.providerTaskId}) DESC NULLS LAST
          LIMIT 1`

  // applied under the webhook request's trace id (stored with the row): its task event and log lines name it
  const processRow = (row: InboxRow) =>
    traced(
      "InboxProcessor.process",
      row.trace_id === null ? undefined : resumedSpan(row.trace_id),
      (traceId) => processTraced(row, traceId)
    )

  const processTraced = (row: InboxRow, traceId: string) =>
    Effect.gen(function*() {
      const protocol = webhookProtocolOf(row.provider)
      if (protocol === undefined) return yield* markDead(row.id, "unknown_provider", row.provider)
      const payload = row.body === null
        ? Either.right(row.payload)
        : Either.try({ try: () => JSON.parse(row.body!) as unknown, catch: () => "stored body is not JSON" })
      const report = Either.flatMap(payload, protocol.parse)
      if (Either.isLeft(report)) return yield* markDead(row.id, "unreadable", report.left)
      // no attempt can have such an id (PostgreSQL could not store it), and no task can record it: dead at once
      const unstorable = unstorableField(report.right)
      if (unstorable !== undefined) {
        yield* Effect.logWarning("callback holds text PostgreSQL cannot store").pipe(
          Effect.annotateLogs({ field: unstorable })
        )
        return yield* markDead(row.id, "unstorable_text", `${unstorable} holds NUL or a lone surrogate`)
      }
      const [attempt] = yield* findAttempt(row, report.right)
      if (
        attempt !== undefined && attempt.provider_task_id !== null && report.right.providerTaskId !== null &&
        attempt.provider_task_id !== report.right.providerTaskId
      ) {
        return yield* markDead(
          row.id,
          "attempt_mismatch",
          `${report.right.providerTaskId} is not ${attempt.provider_task_id}`
        )
      }
      if (attempt === undefined) {
        const flagged = row.retry_count + 1 >= flagAfter
        if (flagged) yield* Effect.logWarning("orphan callback: no attempt knows it yet")
        return yield* retryLater(row, "orphan", flagged ? "orphan" : "retry", 600)
      }
      // an unsigned callback's outcome is a claim: applied as "running" (no outcome, no output), and the attempt is
      // polled at once, so the provider's own answer decides
      const claim = !signsBody(protocol.scheme) && isTerminalReport(report.right)
      const r = claim ? unconfirmed(report.right) : report.right
      if (claim) {
        yield* Effect.logInfo(`unsigned callback claims ${report.right.status}: confirming it with a provider query`)
        yield* Metric.increment(unsignedClaims)
      }
      const observation = new ProviderObservation({
        provider: row.provider as ProviderName,
        providerEventId: row.provider_event_id,
        dedupKey: row.dedup_key,
        providerTaskId: r.providerTaskId,
        clientRequestId: r.clientRequestId,
        attemptId: attempt.attempt_id as AttemptId,
        providerSequence: r.providerSequence,
        providerOccurredAt: row.provider_occurred_at,
        receivedAt: row.received_at,
        status: r.status,
        stage: r.stage,
        progress: r.progress,
        errorClass: r.errorClass,
        errorCode: r.errorCode,
        outputRefs: r.outputRefs,
        source: "webhook",
        payloadHash: row.payload_hash.toString("hex"),
        traceId
      }, trusted)
      const taskId = attempt.task_id as TaskId
      const sent = yield* tasks.sendWithin(
        taskId,
        (c) =>
          claim
            ? Effect.zipLeft(
              c.Observe(observation),
              c.Recheck({ attemptId: observation.attemptId, traceId: observation.traceId })
            )
            : c.Observe(observation),
        sendTimeout
      ).pipe(
        Effect.catchTag("TimeoutException", () => Effect.fail({ _tag: "Timeout" as const })),
        Effect.either
      )
      if (Either.isRight(sent)) return yield* markProcessed(row.id)
      if (sent.left._tag === "TaskNotFound") return yield* markDead(row.id, "task_not_found", attempt.task_id)
      if (sent.left._tag === "WriteFenced") {
        yield* Metric.increment(fencedCallbacks)
        yield* Effect.logInfo("callback fenced; it waits for the fence", sent.left)
        return yield* fencedLater(row)
      }
      if (row.retry_count + 1 >= maxRetries) return yield* markDead(row.id, sent.left._tag, "retries exhausted")
      yield* Effect.logWarning("callback will be retried", sent.left)
      return yield* retryLater(row, sent.left._tag, "retry", 60)
    }).pipe(
      Effect.annotateLogs({ inbox_id: row.id, provider: row.provider }),
      Effect.catchAllCause((cause) => Effect.logError("inbox row failed; its lease will expire and retry", cause))
    )

  const drain = Effect.gen(function*() {
    // READ_ONLY, MAINTENANCE: rows stay pending, untouched, and are applied by the first sweep after the window
    if (!(yield* fence.allows("writes"))) return yield* Metric.increment(inboxDrainsPaused).pipe(Effect.as(0))
    const rows = yield* claim
    yield* Effect.forEach(rows, processRow, { concurrency: 16, discard: true })
    return rows.length
  })

  const inbox = yield* CallbackInbox
  yield* inbox.forgetBodies(c.bodyRetention).pipe(
    Effect.repeat({ until: (n) => n < 1000 }),
    Effect.catchAllCause((cause) => Effect.logWarning("inbox retention sweep failed", cause)),
    Effect.repeat(Schedule.spaced(Duration.minutes(10))),
    Effect.forkScoped
  )

  yield* runWakeLoop({
    name: "inbox processor",
    channel: INBOX_CHANNEL,
    sweep: sweepInterval,
    batchSize,
    backoff: { base: Duration.millis(200), cap: Duration.seconds(10) },
    drain
  }).pipe(Effect.forkScoped)
}))
