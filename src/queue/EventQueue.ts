import { Context, type Effect, Schema, type Scope } from "effect"

/** One message for the queue: the domain event of one task change (DESIGN §7). */
export interface OutgoingMessage {
  /** The message key: the task id (a RocketMQ message key, for lookups). */
  readonly key: string
  /** The FIFO message group: the task id, so one task's events are delivered in order. */
  readonly group: string
  /** Our event id: consumers de-duplicate on it (every hop is at-least-once). */
  readonly eventId: string
  /** The JSON of the domain event. */
  readonly body: string
}

/** One delivery to a consumer: acked only after the consumer's own effect is durable. */
export interface Delivery {
  readonly key: string
  readonly eventId: string
  readonly body: string
  /** 1 for the first delivery, more after redeliveries. */
  readonly attempt: number
}

export class QueueUnavailable extends Schema.TaggedError<QueueUnavailable>()("QueueUnavailable", {
  message: Schema.String
}) {}

/**
 * The event queue between the outbox relay and the consumers (RocketMQ 5 in production, an in-process queue for
 * `npm start` on a bare machine). Both are at-least-once and ordered per message group: a message is redelivered
 * until its handler succeeds, and a group's next message waits for the one before it.
 */
export class EventQueue extends Context.Tag("EventQueue")<EventQueue, {
  /** Sends every message (in order per group) or fails: the caller keeps them and retries. */
  readonly publish: (messages: ReadonlyArray<OutgoingMessage>) => Effect.Effect<void, QueueUnavailable>
  /**
   * Consumes as `group` for as long as the scope lives: each delivery is handed to `handle`; success acks it,
   * failure redelivers it later (the group's later messages wait).
   */
  readonly consume: <E>(
    group: string,
    handle: (delivery: Delivery) => Effect.Effect<void, E>
  ) => Effect.Effect<void, never, Scope.Scope>
  /** Succeeds while the queue answers (RocketMQ: its proxy serves the topic's route); for `/readyz`. */
  readonly ping: Effect.Effect<void, QueueUnavailable>
}>() {}
