import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Cause, Duration, Effect, Either, type Exit, Metric, Option } from "effect"
import { INBOX_CHANNEL } from "../persistence/channels.js"
import { makeGroupCommit } from "../persistence/GroupCommit.js"
import { storableText } from "../persistence/storableText.js"
import { storageUnavailable } from "../persistence/storageUnavailable.js"
import { INBOX_MAX_BATCH, INBOX_MORE_WHEN_QUEUED, InboxSettings } from "./inboxSettings.js"

export interface InboxEntry {
  readonly provider: string
  readonly dedupKey: string
  readonly providerEventId: string | null
  readonly providerTaskId: string | null
  readonly clientRequestId: string | null
  readonly attemptId: string | null
  readonly providerOccurredAt: Date | null
  readonly signatureKeyVersion: string
  readonly payloadHash: string
  /** The verified body, as received: stored as text, never re-serialised from a parsed value. */
  readonly body: string
  /** The webhook request's trace id: the processor applies the callback under it. */
  readonly traceId: string
}

const jsonbSafeSlow = (text: string): boolean =>
  !/\\u0000/i.test(text) &&
  !/\\ud[89ab][0-9a-f]{2}(?!\\ud[c-f][0-9a-f]{2})|(?<!\\ud[89ab][0-9a-f]{2})\\ud[c-f][0-9a-f]{2}/i.test(text) &&
  !/[\ud800-\udfff]/.test(text.replace(/[\ud800-\udbff][\udc00-\udfff]/g, ""))

/**
 * Whether jsonb can hold this JSON exactly (it refuses \u0000 and unpaired surrogates). Most bodies have neither a
 * \u escape nor a surrogate: one scan for each, and the full checks (a copy of the text among them) only then.
 */
const jsonbSafe = (text: string): boolean =>
  (/\\u/i.test(text) || /[\ud800-\udfff]/.test(text)) ? jsonbSafeSlow(text) : true

const storable = (text: string | null) => text === null ? null : storableText(text)

/**
 * One row as the INSERT reads it. The keys come from the provider's JSON, which may hold text PostgreSQL cannot
 * store (a NUL, a lone surrogate): stored sanitised, so the callback is kept (and dead-lettered by the processor,
 * which reads the body) instead of being refused with a 503 its provider would retry for days. `payload` (jsonb,
 * for queries) is cast from the body by PostgreSQL: a parsed value is never serialised again here.
 */
export const inboxRecord = (e: InboxEntry) => ({
  provider: e.provider,
  dedup_key: storableText(e.dedupKey),
  provider_event_id: storable(e.providerEventId),
  provider_task_id: storable(e.providerTaskId),
  client_request_id: storable(e.clientRequestId),
  attempt_id: e.attemptId,
  provider_occurred_at: e.providerOccurredAt,
  signature_key_version: storableText(e.signatureKeyVersion),
  payload_hash: e.payloadHash,
  body: e.body,
  as_jsonb: jsonbSafe(e.body),
  trace_id: e.traceId
})

/**
 * One multi-row INSERT of `$1` (a JSON array of inboxRecord rows), with one NOTIFY on `$2` when any row is new,
 * delivered at commit. Exported for bench:webhooks' ceiling, which runs this very statement.
 */
export const INBOX_INSERT = `
  WITH ins AS (
    INSERT INTO provider_callback_inbox (provider, dedup_key, provider_event_id, provider_task_id,
      client_request_id, attempt_id, provider_occurred_at, signature_key_version, payload_hash, body, payload,
      trace_id)
    SELECT r.provider, r.dedup_key, r.provider_event_id, r.provider_task_id, r.client_request_id,
      r.attempt_id, r.provider_occurred_at, r.signature_key_version, decode(r.payload_hash, 'hex'), r.body,
      CASE WHEN r.as_jsonb THEN r.body::jsonb END, r.trace_id
    FROM jsonb_to_recordset($1::jsonb) AS r(
      provider text, dedup_key text, provider_event_id text, provider_task_id text, client_request_id text,
      attempt_id uuid, provider_occurred_at timestamptz, signature_key_version text, payload_hash text,
      body text, as_jsonb boolean, trace_id text)
    ON CONFLICT (provider, dedup_key) DO NOTHING
    RETURNING provider, dedup_key
  ), wake AS (
    SELECT pg_notify($2, count(*)::text) FROM ins HAVING count(*) > 0
  )
  SELECT provider, dedup_key FROM ins, (SELECT count(*) FROM wake) w`

const byKey = (a: { provider: string; dedup_key: string }, b: { provider: string; dedup_key: string }) =>
  a.provider < b.provider
    ? -1
    : a.provider > b.provider
    ? 1
    : a.dedup_key < b.dedup_key
    ? -1
    : a.dedup_key > b.dedup_key
    ? 1
    : 0

/**
 * INBOX_INSERT's `$1`: the rows in key order, so two batches holding the same duplicates take their locks in the
 * same order (in arrival order, they deadlocked now and then under load, and both were written again row by row).
 */
export const inboxBatch = (entries: ReadonlyArray<InboxEntry>): string =>
  JSON.stringify(entries.map(inboxRecord).sort(byKey))

/** One row's write: stored or duplicate, or why it failed (PostgreSQL's error, or a defect). */
export type Written = Either.Either<"stored" | "duplicate", Cause.Cause<SqlError>>

const batchFallbacks = Metric.counter("inbox_batch_fallbacks", {
  description: "inbox write batches that failed and were retried row by row"
})

/**
 * The durable record of every verified callback. `store` answers only after the row (or its earlier
 * duplicate) is committed. Concurrent callbacks are written as one multi-row INSERT (one round trip, one WAL
 * flush) with one NOTIFY for the processors, delivered at commit; a batch that fails for any reason (an SQL
 * error, or a defect such as a throw while building it) is retried row by row so one bad row cannot fail its
 * neighbours.
 */
export class CallbackInbox extends Effect.Service<CallbackInbox>()("CallbackInbox", {
  scoped: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    // suspended: anything thrown while the statement is built fails this batch as a defect, caught below
    const insert = (entries: ReadonlyArray<InboxEntry>) =>
      Effect.suspend(() =>
        sql.unsafe<{ provider: string; dedup_key: string }>(INBOX_INSERT, [inboxBatch(entries), INBOX_CHANNEL])
      ).pipe(
        Effect.map((rows) => {
          const stored = new Set(rows.map((r) => `${r.provider}\u0000${r.dedup_key}`))
          return entries.map((e) =>
            Either.right<"stored" | "duplicate">(
              stored.has(`${e.provider}\u0000${storableText(e.dedupKey)}`) ? "stored" : "duplicate"
            )
          )
        })
      )

    // a failure of one row is its own answer; an interruption (shutdown) is everyone's
    const alone = (e: InboxEntry): Effect.Effect<Written> =>
      insert([e]).pipe(
        Effect.map((r) => r[0]!),
        Effect.catchAllCause((cause) =>
          Cause.isInterruptedOnly(cause) ? Effect.interrupt : Effect.succeed(Either.left(cause))
        )
      )

    const { writeParallelism } = yield* Effect.orDie(InboxSettings.config)
    const enqueue = yield* makeGroupCommit({
      name: "inbox",
      parallelism: writeParallelism,
      maxBatch: INBOX_MAX_BATCH,
      moreWhenQueued: INBOX_MORE_WHEN_QUEUED,
      run: (entries: ReadonlyArray<InboxEntry>): Effect.Effect<ReadonlyArray<Written>> =>
        entries.length === 1
          ? Effect.map(alone(entries[0]!), (r) => [r])
          : insert(entries).pipe(
            Effect.catchAllCause((cause) =>
              Cause.isInterruptedOnly(cause)
                ? Effect.interrupt
                : Effect.logWarning("inbox batch failed; writing its rows one by one", cause).pipe(
                  Effect.annotateLogs({ rows: entries.length }),
                  Effect.zipRight(Metric.increment(batchFallbacks)),
                  Effect.zipRight(Effect.forEach(entries, alone))
                )
            )
          )
    })

    /** A row's write as `store` answers it: stored or duplicate; StorageUnavailable (logged); a defect (logged). */
    const settle = (result: Written) => {
      if (Either.isRight(result)) return Effect.succeed(result.right)
      const failure = Cause.failureOption(result.left)
      if (Option.isSome(failure)) return storageUnavailable("CallbackInbox")(failure.value)
      return Effect.zipRight(
        Effect.logError("inbox row cannot be written", result.left),
        Effect.die(Cause.squash(result.left))
      )
    }

    /** Stored or duplicate; StorageUnavailable when PostgreSQL failed; a defect (500) when this row cannot be written. */
    // no span: one per webhook (the batch has its own, the SQL client's)
    const store = (e: InboxEntry) => Effect.flatMap(enqueue(e), settle)

    /**
     * `store` for a caller with no fiber (the webhook path): `done` gets the row's write once its batch committed,
     * or failed (then `settle` logs it and answers as `store` would), or an interruption when the runner stops.
     */
    const offer = (e: InboxEntry, done: (exit: Exit.Exit<Written>) => void) => enqueue.offer(e, done)

    /**
     * Whether a callback URL's attempt can still change its task: it is its task's current attempt, neither it nor
     * its task has ended. Past that, a callback URL (an unsigned provider's: Luma) accepts nothing: a leaked one
     * cannot be used to write into the inbox for as long as its token would otherwise live.
     */
    const callbackAttemptOpen = (provider: string, attemptId: string) =>
      sql<{ open: boolean }>`
        SELECT t.current_attempt_id = a.id AND t.status NOT IN ('ready', 'failed', 'canceled')
          AND a.submit_state NOT IN ('REJECTED', 'FAILED', 'CANCELLED') AS open
        FROM task_attempts a JOIN generation_tasks t ON t.id = a.task_id
        WHERE a.id = ${attemptId} AND a.provider = ${provider}`.pipe(
        Effect.map((rows) => rows[0]?.open === true),
        Effect.catchTag("SqlError", storageUnavailable("CallbackInbox"))
      )

    /**
     * Minimisation (seed 12.5.2): a processed callback's body may hold temporary URLs and provider details;
     * after `retention` only the row's facts and its dedup key remain. Dead rows keep theirs for inspection.
     */
    const forgetBodies = Effect.fn("CallbackInbox.forgetBodies")(function*(retention: Duration.Duration) {
      const rows = yield* sql<{ id: number }>`
        UPDATE provider_callback_inbox SET body = NULL, payload = NULL
        WHERE id IN (
          SELECT id FROM provider_callback_inbox
          WHERE process_status = 'processed' AND body IS NOT NULL
            AND processed_at < now() - make_interval(secs => ${Duration.toSeconds(retention)})
          LIMIT 1000
        )
        RETURNING id`
      return rows.length
    })

    return { store, offer, settle, callbackAttemptOpen, forgetBodies } as const
  })
}) {}
