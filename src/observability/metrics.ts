/**
 * The control plane's own metrics, in one list (the README's Metrics table follows it): Effect `Metric`s in the
 * global registry, exported by GET /metrics (src/http/MetricsRoute.ts). Names and units in Prometheus style:
 * seconds, `_total` counters (the exposition adds the suffix), labels of small fixed sets only (a provider, a
 * source, a status: never a task or a project id). Each is updated where its event happens; the `sampled` ones
 * are read from PostgreSQL by every runner (src/observability/MetricsSampler.ts): the same cluster-wide value on
 * each, so aggregate them with max(), not sum().
 */
import { Metric, MetricBoundaries } from "effect"

/** 1 ms .. 10 s: request-scale latencies. */
const latency = MetricBoundaries.fromIterable([
  0.001,
  0.0025,
  0.005,
  0.01,
  0.025,
  0.05,
  0.1,
  0.25,
  0.5,
  1,
  2.5,
  5,
  10
])
/** 10 ms .. 1 h: lags that include a provider, a queue or an outage. */
const lag = MetricBoundaries.fromIterable([0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600])
const sizes = MetricBoundaries.exponential({ start: 1, factor: 2, count: 12 }) // 1 .. 1024

// ── provider intake (seed 12.11.6: persist latency, verify failures, duplicates, reorders; 19.7.8 callback_lag)

export const webhookPersistSeconds = Metric.histogram(
  "webhook_persist_seconds",
  latency,
  "a verified callback's body read to its inbox row committed (the 2xx is sent right after), by provider"
)
export const webhookCallbacks = Metric.counter("webhook_callbacks_total", {
  description: "verified callbacks persisted, by provider and outcome (stored, duplicate: already in the inbox)"
})
export const webhookVerifyFailures = Metric.counter("webhook_verify_failures_total", {
  description: "callbacks whose signature or token did not verify, by provider and reason"
})
export const callbackLagSeconds = Metric.histogram(
  "callback_lag_seconds",
  lag,
  "the provider's event time (signed timestamp, else the body's) to the callback persisted, by provider"
)
export const callbackReorders = Metric.counter("callback_reorders_total", {
  description: "callbacks that arrived after a newer fact of their task (stale sequence, backward status or progress)"
})
export const taskObservations = Metric.counter("task_observations_total", {
  description: "provider observations evaluated by task entities, by provider, source (webhook, poll) and outcome"
})
export const lateAttemptResults = Metric.counter("late_attempt_results_total", {
  description:
    "terminal results of superseded attempts (seed 12.7.3), by provider, status and outcome (recorded for cost reconciliation, or a duplicate)"
})

// ── polling and quotas (seed 12.11.6: poll QPS, share of 429s, quota use per provider)

export const providerPolls = Metric.counter("provider_polls_total", {
  description: "status queries sent to providers, by provider and outcome (ok or the failure kind)"
})
export const providerResponses = Metric.counter("provider_http_responses_total", {
  description: "HTTP answers from provider APIs, by provider and status code (network: no answer)"
})
export const quotaGrants = Metric.counter("quota_grants_total", {
  description: "query slots granted by the provider quota, by provider"
})
export const quotaWaitSeconds = Metric.histogram(
  "quota_wait_seconds",
  lag,
  "time a query waited for its quota slot, by provider"
)
export const quotaLimitQps = Metric.gauge("quota_limit_qps", {
  description:
    "the provider's configured query rate (shared by all runners): quota use = rate(quota_grants_total) / this"
})

// ── provider breaker (seed 19.6: per provider and model, 5xx / timeouts / no answer; src/quota/ProviderBreaker.ts)

export const breakerState = Metric.gauge("provider_breaker_state", {
  description:
    "a provider route's breaker as this runner last saw it: 0 closed, 1 half-open, 2 open, by provider and " +
    "model (model * is the provider credential's 401/403 breaker)"
})
export const breakerTransitions = Metric.counter("provider_breaker_transitions_total", {
  description: "breaker state changes made by this runner, by provider, model and state reached (closed: also resets)"
})
export const breakerRefused = Metric.counter("provider_breaker_refused_total", {
  description: "provider calls not sent because the route's breaker was open, by provider, model and call " +
    "(submit, query, cancel, lookup)"
})
export const breakerFallback = Metric.counter("provider_breaker_local_steps_total", {
  description: "breaker steps taken on this runner's local breaker because Redis did not answer in time"
})

// ── task changes

export const taskTransitions = Metric.counter("task_transitions_total", {
  description: "committed task changes, by source (api, webhook, poll, reconcile, system, operator) and status reached"
})
export const taskChangeWakesSkipped = Metric.counter("tasks_change_wakes_skipped_total", {
  description: "changes that left a polling task polling (a webhook's \"running\", its progress): its lifecycle, " +
    "waiting or parked, was not woken for them, since its next step is the poll already scheduled",
  incremental: true
})
export const taskKeepAlivesHeld = Metric.counter("tasks_keep_alives_held_total", {
  description: "lifecycle runs still going a fifth of TASK_ENTITY_IDLE_TIME in, which then held their entity in " +
    "memory with its keep-alive (a run that settles sooner sends none)",
  incremental: true
})
export const groupCommitBatchSize = Metric.histogram(
  "group_commit_batch_size",
  sizes,
  "items written or read by one group-commit statement, by writer (task_store, inbox, stream_heads, task_loads, " +
    "poll_claims, poll_finishes)"
)
export const groupCommitSeconds = Metric.histogram(
  "group_commit_seconds",
  latency,
  "time of one group-commit statement (one round trip and WAL flush for its batch), by writer"
)

// ── browser delivery (seed 12.11.6: commit → delivery latency, connections, heartbeats, buffers, slow clients)

export const deliverySeconds = Metric.histogram(
  "stream_delivery_seconds",
  lag,
  "a task change's commit to its frame written to a browser stream, by transport (sse, ws); live events only"
)
export const openStreams = Metric.gauge("streams_open", { description: "open browser streams, by transport" })
export const heartbeatFailures = Metric.counter("stream_heartbeat_failures_total", {
  description:
    "heartbeats not written (SSE: socket backed up or gone) or not answered (WebSocket: no pong), by transport"
})
export const bufferDepth = Metric.histogram(
  "stream_buffer_depth",
  sizes,
  "events waiting in a connection's buffer, observed each time one is queued (client backed up or replaying)"
)
export const slowClientCuts = Metric.counter("stream_slow_client_cuts_total", {
  description:
    "streams closed because their client did not read: reason overflow (buffer full) or stalled (write deadline)"
})
export const streamResets = Metric.counter("stream_resets_total", {
  description: "reset events sent (a cursor that cannot be served gap-free), by reason"
})

// ── propagation (seed 12.11.6: Redis publish latency and gap re-reads, outbox backlog, RocketMQ consume lag)

export const busPublishSeconds = Metric.histogram(
  "bus_publish_seconds",
  latency,
  "Redis PUBLISH of one live event, by outcome (ok, failed)"
)
export const redisConnections = Metric.counter("redis_connections_total", {
  description: "Redis connections made ready (the first one and every reconnect), by connection (main, subscriber)"
})
export const redisMasterSwitches = Metric.counter("redis_master_switches_total", {
  description: "reconnects that found another Redis master than before (a Sentinel failover seen), by connection"
})
export const feedRereads = Metric.counter("feed_gap_rereads_total", {
  description: "re-reads of PostgreSQL by a project feed to fill missed events, by cause (bus_gap, hole, tail)"
})
export const queueConsumeLagSeconds = Metric.histogram(
  "queue_consume_lag_seconds",
  lag,
  "RocketMQ: a message's publish (born) time to its delivery to this consumer, by consumer group"
)
export const queueReceiveBatchSize = Metric.histogram(
  "queue_receive_batch_size",
  sizes,
  "RocketMQ: messages one receive brought this consumer (empty long polls not counted), by consumer group; each " +
    "receive costs a round trip, an ack and a Redis pipeline"
)
export const outboxPublished = Metric.counter("outbox_published_total", {
  description: "outbox rows published to the event queue by the relay"
})
export const outboxInFlight = Metric.gauge("outbox_in_flight", {
  description: "outbox rows the relay has read and not yet marked published (its batches being sent or marked)"
})

// ── outputs and the object store (seed 19: outputs leave the worker's disk; a lost object is fetched again)

export const objectStoreOperations = Metric.counter("object_store_operations_total", {
  description: "object store operations, by store (filesystem, s3), op (put, head, read, delete) and outcome " +
    "(ok, missing: head found nothing, timeout, error, body_failed: the stream being stored failed)"
})
export const objectStoreSeconds = Metric.histogram(
  "object_store_operation_seconds",
  lag,
  "one object store operation, start to end (a put lasts as long as the download it stores), by store and op"
)
export const outputFetchDecisions = Metric.counter("output_fetch_decisions_total", {
  description: "what a fetch_output step did, by decision: downloaded, already_stored (the object was in the store: " +
    "no second download), leased_elsewhere (another runner holds the fetch's lease: waited), refetch (the probe " +
    "found no object: the fetch reopened), lost (no object and past the URL's deadline)"
})

// ── sampled from PostgreSQL by every runner (cluster-wide values: aggregate with max)

export const outboxBacklog = Metric.gauge("outbox_backlog", { description: "outbox rows not yet published" })
export const outboxOldestAgeSeconds = Metric.gauge("outbox_oldest_age_seconds", {
  description: "age of the oldest unpublished outbox row (0 when none)"
})
export const inboxRows = Metric.gauge("inbox_rows", {
  description: "callback inbox rows waiting or stuck, by status (pending, retry, orphan, dead)"
})
export const notificationDeadLetters = Metric.gauge("notification_dead_letters", {
  description: "notifications in notification_dead_letters not replayed yet"
})
export const tasksManualReview = Metric.gauge("tasks_manual_review", { description: "tasks waiting in manual_review" })
export const tasksSubmitUnknown = Metric.gauge("tasks_submit_unknown", {
  description: "attempts whose submission outcome is unknown (SUBMIT_UNKNOWN)"
})
/** Unknown submits (SUBMITTING or SUBMIT_UNKNOWN, no provider task id) bound to their job, by what found it. */
export const unknownSubmitsResolved = Metric.counter("unknown_submits_resolved_total", {
  description:
    "submits of unknown outcome bound to the provider's job, by provider and how: webhook (URL token) or lookup",
  incremental: true
})
export const reconciliationsOpen = Metric.gauge("reconciliations_open", {
  description: "contradictory observations waiting for reconciliation"
})
export const pollFallbackRatio = Metric.gauge("poll_fallback_ratio", {
  description: "share of the last 5 minutes' provider-driven task changes that came from polls rather than callbacks"
})
export const samplerFailures = Metric.counter("metrics_sampler_failures_total", {
  description: "rounds of the PostgreSQL sampler that failed (its gauges keep their last values)"
})

export const metricsScrapes = Metric.counter("metrics_scrapes_total", {
  description: "GET /metrics requests, by outcome (ok, unauthorized)"
})
