import { Array as Arr, Context, Effect, Schema, type Scope } from "effect"

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

/**
 * What a consumer does with one received batch: an answer per delivery, in the same order — true when it is done
 * (acked), false to have it (and its group's later messages) redelivered later. The deliveries of one call all
 * belong to different groups, so they may be handled side by side (one Redis pipeline for the batch).
 */
export type BatchHandler = (deliveries: ReadonlyArray<Delivery>) => Effect.Effect<ReadonlyArray<boolean>>

/** Items by group, each group in its original order. */
export const groupsOf = <A>(items: ReadonlyArray<A>, groupOf: (a: A) => string): Array<Array<A>> =>
  Object.values(Arr.groupBy(items, groupOf))

/** A handler of one delivery at a time as a BatchHandler (the deliveries of a batch run side by side). */
export const eachDelivery = <E>(handle: (delivery: Delivery) => Effect.Effect<void, E>): BatchHandler => (deliveries) =>
  Effect.forEach(deliveries, (d) =>
    handle(d).pipe(
      Effect.as(true),
      Effect.catchAllCause((cause) =>
        Effect.logWarning("event handler failed; redelivering", cause).pipe(
          Effect.annotateLogs({ event_id: d.eventId, task_id: d.key, attempt: d.attempt }),
          Effect.as(false)
        )
      )
    ), { concurrency: "unbounded" })

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
   * Consumes as `group` for as long as the scope lives: deliveries are handed to `handle` in batches of distinct
   * groups; true acks one, false redelivers it later (the group's later messages wait).
   */
  readonly consume: (group: string, handle: BatchHandler) => Effect.Effect<void, never, Scope.Scope>
  /** Succeeds while the queue answers (RocketMQ: its proxy serves the topic's route); for `/readyz`. */
  readonly ping: Effect.Effect<void, QueueUnavailable>
}>() {}
