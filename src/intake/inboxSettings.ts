import * as S from "../config/Settings.js"

/** Callbacks in one inbox INSERT at most (CallbackInbox's group commit, and bench:webhooks' ceiling). */
export const INBOX_MAX_BATCH = 128

/**
 * While an inbox batch is being written, the next starts only once this many callbacks wait: each INSERT costs the
 * runner (its statement, the socket write, the answer) and PostgreSQL (concurrent inserts into one table) much more
 * than a row does. With a batch started as soon as a writer was free, bench:webhooks' runner wrote 8 callbacks per
 * INSERT at 6,800/s (4 writers); held to 32 waiting, 28 per INSERT at 12,000/s (a writer alone: 31, 11,200/s; the
 * latency at 1,000/s offered unchanged). bench:webhooks' ceiling writes the same way.
 */
export const INBOX_MORE_WHEN_QUEUED = 32

/** The callback inbox: written by the webhook gateway (CallbackInbox), drained by the InboxProcessor. */
export const InboxSettings = S.area("Inbox", "storing provider callbacks and applying them to tasks", {
  writeParallelism: S.integer(
    "INBOX_WRITE_PARALLELISM",
    `group commit workers writing callbacks to the inbox; one more starts only while ${INBOX_MORE_WHEN_QUEUED} callbacks wait`,
    4,
    { min: 1 }
  ),
  // a runner can be a pure gateway (or a pure worker); every runner processes by default
  processorEnabled: S.boolean(
    "INBOX_PROCESSOR_ENABLED",
    "this runner drains the inbox; false makes it a pure webhook gateway",
    true
  ),
  sweepInterval: S.duration(
    "INBOX_SWEEP_INTERVAL",
    "safety-net sweep of the inbox; LISTEN/NOTIFY wakes the processor at once otherwise",
    "1 second"
  ),
  batchSize: S.integer("INBOX_BATCH_SIZE", "inbox rows claimed at once", 64, { min: 1 }),
  orphanFlagAfter: S.integer(
    "ORPHAN_FLAG_AFTER",
    "tries after which a callback that beat its submit response (an orphan) is flagged; orphans are never dropped",
    8,
    { min: 1 }
  ),
  // a task that keeps refusing (not an orphan: those wait forever) goes to the dead letter eventually
  maxRetries: S.integer(
    "INBOX_MAX_RETRIES",
    "tries after which a row its task keeps refusing goes to the dead letters (orphans wait forever)",
    50,
    { min: 1 }
  ),
  sendTimeout: S.duration(
    "INBOX_SEND_TIMEOUT",
    "how long an observation sent to a task's entity may take",
    "30 seconds"
  ),
  bodyRetention: S.duration(
    "INBOX_BODY_RETENTION",
    "bodies of processed callbacks are dropped after this",
    "7 days"
  )
})
