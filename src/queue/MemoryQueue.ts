import { Duration, Effect, Layer, Queue } from "effect"
import { type Delivery, EventQueue, type OutgoingMessage } from "./EventQueue.js"

/**
 * The in-process queue for `npm start` on a bare machine (no ROCKETMQ_ENDPOINTS): the same interface and
 * semantics — every consumer group gets every message, in publish order, redelivered until its handler succeeds.
 * It is not durable: after a crash the outbox rows are already marked published, so live notifications of the
 * last moments are lost; the facts are not (task_events in PostgreSQL, which clients re-read by cursor).
 */
export const layerMemory: Layer.Layer<EventQueue> = Layer.sync(EventQueue, () => {
  const groups = new Map<string, Queue.Queue<OutgoingMessage>>()
  const queueOf = (group: string) =>
    Effect.sync(() => {
      let q = groups.get(group)
      if (q === undefined) {
        q = Effect.runSync(Queue.unbounded<OutgoingMessage>())
        groups.set(group, q)
      }
      return q
    })
  // messages published before a group first consumes are kept for it, as a broker keeps them for a known group
  const known = ["notification-dispatcher"]
  for (const g of known) Effect.runSync(queueOf(g))

  return EventQueue.of({
    publish: (messages) => Effect.forEach([...groups.values()], (q) => Queue.offerAll(q, messages), { discard: true }),
    consume: (group, handle) =>
      Effect.gen(function*() {
        const q = yield* queueOf(group)
        yield* Effect.gen(function*() {
          const m = yield* Queue.take(q)
          for (let attempt = 1;; attempt++) {
            const delivery: Delivery = { key: m.key, eventId: m.eventId, body: m.body, attempt }
            const ok = yield* handle(delivery).pipe(Effect.as(true), Effect.catchAllCause(() => Effect.succeed(false)))
            if (ok) break
            yield* Effect.sleep(Duration.millis(Math.min(5000, 100 * 2 ** Math.min(attempt, 6))))
          }
        }).pipe(Effect.forever, Effect.forkScoped)
      })
  })
})
