import { Clock, Context, Deferred, Duration, Effect, Exit, Layer, Metric, Option, Schema, type Scope } from "effect"
import { Writable } from "node:stream"
import { type ILogger, type MessageView, Producer, SimpleConsumer } from "rocketmq-client-nodejs"
import * as S from "../config/Settings.js"
import { backoffSchedule } from "../domain/backoff.js"
import { queueConsumeLagSeconds, queueReceiveBatchSize } from "../observability/metrics.js"
import { labelled } from "../observability/series.js"
import {
  type BatchHandler,
  type Delivery,
  EventQueue,
  groupsOf,
  type OutgoingMessage,
  QueueUnavailable
} from "./EventQueue.js"
import { ackAll, makeAckBehind } from "./RocketMQAck.js"

/**
 * The defaults of the options below, which the settings (QueueSettings) take too, and bench:propagation's ceiling:
 * one place for each.
 */
export const defaults = {
  receivers: 4,
  receiveBatch: 32,
  // a whole outbox batch's tasks (OUTBOX_BATCH_SIZE): at 64, a 256-row batch took four send round trips
  sendConcurrency: 256
} as const

export interface RocketMQOptions {
  /** The proxy's gRPC endpoints, e.g. "127.0.0.1:8081". */
  readonly endpoints: string
  /** A FIFO topic; each consumer group must exist and be orderly (scripts/rocketmq.sh creates both). */
  readonly topic: string
  /** How long a received message stays hidden while its handler runs (default 60 s). */
  readonly invisibleDuration?: Duration.DurationInput
  /** How soon a failed delivery, and its group's later messages, come back (default 1 s). */
  readonly retryDelay?: Duration.DurationInput
  /** Receives in flight per consumer group (default `defaults.receivers`). */
  readonly receivers?: number
  /** Messages received per receive call (default `defaults.receiveBatch`). */
  readonly receiveBatch?: number
  /**
   * Message groups sent side by side by one publish (default `defaults.sendConcurrency`); one group's messages go one
   * after another.
   */
  readonly sendConcurrency?: number
}

type Client = Producer | SimpleConsumer

const Envelope = Schema.Struct({
  key: Schema.String,
  eventId: Schema.NonEmptyString,
  body: Schema.String,
  attempt: Schema.Int.pipe(Schema.positive())
})
const decodeDelivery = Schema.decodeUnknownEither(Envelope)

const unavailable = (what: string, cause?: unknown) =>
  new QueueUnavailable({ message: cause === undefined ? what : `${what}: ${String(cause)}` })

/**
 * shutdown() first tells the proxy; while the proxy is down that rejects (or hangs) before the client closes its
 * channels, and its telemetry stream keeps reconnecting every second, which keeps Node alive. So: stop those
 * reconnects, and if shutdown fails, forget the routes (nothing to tell) and shut down again to close everything.
 */
const shutdown = (client: Client) =>
  Effect.gen(function*() {
    Object.assign(client, {
      createTelemetryStream: () => new Writable({ objectMode: true, write: (_c, _e, cb) => cb() })
    })
    const once = Effect.tryPromise(() => client.shutdown()).pipe(Effect.timeout("3 seconds"), Effect.exit)
    if (Exit.isFailure(yield* once)) {
      ;(client as unknown as { readonly topicRouteCache: Map<string, unknown> }).topicRouteCache.clear()
      yield* once
    }
  })

/** One start: a failed or abandoned client is shut down, or its timers keep Node alive. */
const startOnce = <C extends Client>(make: () => C) =>
  Effect.suspend(() => {
    const client = make()
    const started = client.startup()
    return Effect.tryPromise({ try: () => started, catch: (cause) => cause }).pipe(
      // startup waits forever for the proxy's settings if they never come
      Effect.timeout("15 seconds"),
      Effect.as(client),
      Effect.onError(() => {
        started.then(() => client.shutdown(), () => undefined).catch(() => undefined)
        return shutdown(client)
      })
    )
  })

/** Starts a client, retrying in the background until RocketMQ answers; shut down when the scope closes. */
const start = <C extends Client>(what: string, make: () => C): Effect.Effect<C, never, Scope.Scope> =>
  Effect.uninterruptibleMask((restore) =>
    restore(
      startOnce(make).pipe(
        Effect.tapError((cause) => Effect.logWarning(`RocketMQ ${what} not started, retrying: ${String(cause)}`)),
        Effect.retry(backoffSchedule({ base: Duration.millis(500), cap: Duration.seconds(5) })),
        Effect.orDie // the schedule never ends
      )
    ).pipe(Effect.tap((client) => Effect.addFinalizer(() => shutdown(client))))
  )

/** The event queue on a RocketMQ 5 proxy: FIFO messages (message group = `group`), orderly SimpleConsumers. */
export const makeRocketMQQueue = (
  options: RocketMQOptions
): Effect.Effect<Context.Tag.Service<EventQueue>, never, Scope.Scope> =>
  Effect.gen(function*() {
    const { endpoints, topic } = options
    const invisibleMs = Duration.toMillis(options.invisibleDuration ?? "60 seconds")
    const retryMs = Duration.toMillis(options.retryDelay ?? "1 second")
    const receivers = options.receivers ?? defaults.receivers
    const receiveBatch = options.receiveBatch ?? defaults.receiveBatch
    const sendConcurrency = options.sendConcurrency ?? defaults.sendConcurrency
    // the default logger writes to ~/logs/rocketmq, an error a second during an outage; failures are logged here
    const logger: ILogger = { info: () => {}, warn: () => {}, error: () => {} }
    const client = { endpoints, namespace: "", logger }

    const producer = yield* Deferred.make<Producer>()
    yield* start("producer", () => new Producer({ ...client, topics: [topic] })).pipe(
      Effect.flatMap((p) => Deferred.succeed(producer, p)),
      Effect.zipRight(Effect.never),
      Effect.scoped,
      Effect.forkScoped
    )

    const send = (p: Producer, m: OutgoingMessage) =>
      Effect.tryPromise({
        try: () =>
          p.send({
            topic,
            body: Buffer.from(m.body),
            keys: [m.key],
            messageGroup: m.group,
            properties: new Map([["eventId", m.eventId]])
          }),
        catch: (cause) => unavailable("RocketMQ send failed", cause)
      })

    const publish = Effect.fn("RocketMQQueue.publish")(function*(messages: ReadonlyArray<OutgoingMessage>) {
      if (!(yield* Deferred.isDone(producer))) return yield* Effect.fail(unavailable("RocketMQ is not connected yet"))
      const p = yield* Deferred.await(producer)
      // one group's messages in order (each after the previous one's acknowledgement); groups side by side
      yield* Effect.forEach(groupsOf(messages, (m) => m.group), (group) => Effect.forEach(group, (m) => send(p, m)), {
        concurrency: sendConcurrency,
        discard: true
      }).pipe(Effect.timeoutFail({ duration: "10 seconds", onTimeout: () => unavailable("RocketMQ send timed out") }))
    })

    const consume = (group: string, handle: BatchHandler) =>
      Effect.gen(function*() {
        const consumer = yield* start(
          `consumer ${group}`,
          () =>
            new SimpleConsumer({
              ...client,
              consumerGroup: group,
              awaitDuration: 5000,
              subscriptions: new Map([[topic, "*"]])
            })
        )
        // one request for a round's acks (RocketMQAck.ts); a failed one is redelivered after the invisible duration
        const ack = (ms: ReadonlyArray<MessageView>) =>
          ackAll(consumer, group, ms).pipe(
            Effect.flatMap((failed) =>
              failed.length === 0 ? Effect.void : Effect.logWarning(
                `RocketMQ ack failed for ${failed.length} of ${ms.length} (redelivered later): ${failed[0]!.error}`
              )
            )
          )
        // a round's ack goes out while its receiver asks for the next messages (RocketMQAck.ts)
        const ackBehind = yield* makeAckBehind(receivers, ack)
        // back soon instead of after the invisible duration; the orderly queue stays locked until then
        const retryLater = (m: MessageView) =>
          Effect.tryPromise(() => consumer.changeInvisibleDuration(m, retryMs)).pipe(Effect.ignore)

        // receive's long poll cannot be cancelled: on interruption wait for it and hand its messages back
        const receive = Effect.async<ReadonlyArray<MessageView>, unknown>((resume) => {
          const received = consumer.receive(receiveBatch, invisibleMs)
          received.then((ms) => resume(Effect.succeed(ms)), (e) => resume(Effect.fail(e)))
          return Effect.promise(() =>
            received.then((ms) => Promise.all(ms.map((m) => consumer.changeInvisibleDuration(m, retryMs))), () => [])
              .catch(() => [])
          )
        })

        // The broker's attempt count restarts at 1 when a redelivered batch differs from the first one (new messages
        // behind it), so the last failed attempt is also kept here (by message id, bounded) and the larger count wins.
        const failures = new Map<string, number>()
        const consumeLag = labelled(queueConsumeLagSeconds, { group })
        const receivedPerCall = labelled(queueReceiveBatchSize, { group })

        /**
         * Hands one round (one message per group) to the handler; acks what it handled. Answers, per message, whether
         * its group goes on (false: it and its group's later messages come back after retryMs).
         */
        const deliverRound = (round: ReadonlyArray<MessageView>) =>
          Effect.gen(function*() {
            const now = yield* Clock.currentTimeMillis
            const deliveries: Array<Delivery> = []
            const handled: Array<MessageView> = []
            const undecodable: Array<MessageView> = []
            for (const m of round) {
              // the envelope only (three strings and a count); the body is the consumer's to decode
              const decoded = decodeDelivery({
                key: m.keys[0] ?? "",
                eventId: m.properties.get("eventId") ?? "",
                body: m.body.toString("utf8"),
                attempt: Math.max(m.deliveryAttempt ?? 1, (failures.get(m.messageId) ?? 0) + 1)
              })
              if (decoded._tag === "Left") {
                undecodable.push(m)
                continue
              }
              deliveries.push(decoded.right)
              handled.push(m)
              // the producer's clock to ours: one machine, or NTP-close ones
              if (m.bornTimestamp !== undefined) {
                yield* Metric.update(consumeLag, Math.max(0, now - m.bornTimestamp.getTime()) / 1000)
              }
            }
            for (const m of undecodable) {
              yield* Effect.logError("RocketMQ message without an event id or key: dropped").pipe(
                Effect.annotateLogs({ message_id: m.messageId, message_group: m.messageGroup ?? "", group })
              )
            }
            const ok = deliveries.length === 0 ? [] : yield* handle(deliveries)
            const done = [...undecodable, ...handled.filter((_, i) => ok[i] === true)]
            handled.forEach((m, i) => {
              if (ok[i] === true) return failures.delete(m.messageId)
              failures.set(m.messageId, deliveries[i]!.attempt)
              if (failures.size > 10_000) failures.delete(failures.keys().next().value!)
            })
            if (done.length > 0) yield* ackBehind(done)
            return new Set(handled.filter((_, i) => ok[i] !== true))
          })

        // a receive returns at most one message per group in practice; should one hold more, they go in rounds
        const handleBatch = (messages: ReadonlyArray<MessageView>) => {
          const pending = new Set(messages)
          return Effect.gen(function*() {
            let groups = groupsOf(messages, (m) => m.messageGroup ?? m.messageId)
            while (groups.length > 0) {
              const failed = yield* deliverRound(groups.map((g) => g[0]!))
              groups.forEach((g) => pending.delete(g[0]!))
              const stopped = groups.filter((g) => failed.has(g[0]!))
              yield* Effect.forEach(stopped.flat(), (m) => {
                pending.delete(m)
                return retryLater(m)
              }, { concurrency: "unbounded", discard: true })
              groups = groups.filter((g) => !failed.has(g[0]!) && g.length > 1).map((g) => g.slice(1))
            }
          }).pipe(Effect.onInterrupt(() => Effect.forEach(pending, retryLater, { discard: true })))
        }

        const loop = receive.pipe(
          Effect.tapError((e) => Effect.logWarning(`RocketMQ receive failed (${group}): ${String(e)}`)),
          Effect.retry(backoffSchedule({ base: Duration.millis(200), cap: Duration.seconds(5) })),
          Effect.orDie, // the schedule never ends
          // a long poll that ended empty is not counted: the histogram says how well deliveries are batched
          Effect.tap((ms) => ms.length === 0 ? Effect.void : Metric.update(receivedPerCall, ms.length)),
          Effect.flatMap(handleBatch),
          Effect.forever
        )
        // several receives in flight: a receive returns at most one pending message per message group (FIFO), and
        // the broker never hands out a group's next message before the previous one is acked, so order holds
        yield* Effect.all(Array.from({ length: receivers }, () => loop), { concurrency: "unbounded", discard: true })
      }).pipe(Effect.scoped, Effect.forkScoped, Effect.asVoid)

    // a route query through the producer's own channel: the proxy answers and knows the topic
    const ping = Effect.gen(function*() {
      if (!(yield* Deferred.isDone(producer))) return yield* Effect.fail(unavailable("RocketMQ is not connected yet"))
      const p = yield* Deferred.await(producer)
      yield* Effect.tryPromise({
        // protected in the client's types; it is what the client's own 30 s route refresh calls
        try: () => (p as unknown as { readonly updateRoutes: () => Promise<void> }).updateRoutes(),
        catch: (cause) => unavailable("RocketMQ route query failed", cause)
      })
    })

    return EventQueue.of({ publish, consume, ping })
  })

export const QueueSettings = S.area("Queue", "the event queue between the outbox relay and the dispatchers", {
  endpoints: S.optionalString(
    "ROCKETMQ_ENDPOINTS",
    "RocketMQ 5 proxy (gRPC), host:port; unset or empty: the in-process queue (one runner)"
  ),
  topic: S.string("ROCKETMQ_TOPIC", "topic of task events (FIFO per task)", "task-events"),
  receivers: S.integer("ROCKETMQ_RECEIVERS", "concurrent receive loops per consumer group", defaults.receivers, {
    min: 1
  }),
  receiveBatch: S.integer("ROCKETMQ_RECEIVE_BATCH", "messages asked for by one receive", defaults.receiveBatch, {
    min: 1,
    max: 32
  }),
  sendConcurrency: S.integer(
    "ROCKETMQ_SEND_CONCURRENCY",
    "message groups (tasks) one publish sends side by side (the default is a whole outbox batch); one task's messages go one after another",
    defaults.sendConcurrency,
    { min: 1 }
  )
})

/** RocketMQ from ROCKETMQ_ENDPOINTS and ROCKETMQ_TOPIC; it starts (and publish fails) while RocketMQ is down. */
export const layerRocketMQ: Layer.Layer<EventQueue> = Layer.scoped(
  EventQueue,
  Effect.gen(function*() {
    const { endpoints, receiveBatch, receivers, sendConcurrency, topic } = yield* QueueSettings.config
    if (Option.isNone(endpoints) || endpoints.value.length === 0) {
      return yield* Effect.dieMessage("ROCKETMQ_ENDPOINTS: required by the RocketMQ queue, not set")
    }
    return yield* makeRocketMQQueue({ endpoints: endpoints.value, topic, receivers, receiveBatch, sendConcurrency })
  }).pipe(Effect.orDie)
)
