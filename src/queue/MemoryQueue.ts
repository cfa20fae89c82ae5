import { Duration, Effect, Layer, Queue } from "effect"
import { backoff } from "../domain/backoff.js"
import { type Delivery, EventQueue, groupsOf, type OutgoingMessage } from "./EventQueue.js"

/**
 * The in-process queue for `npm start` on a bare machine (no ROCKETMQ_ENDPOINTS): the same interface and
 * semantics — every consumer group gets every message, in publish order, redelivered until its handler succeeds.
 * It is not durable: after a crash the outbox rows are already marked published, so live notifications of the
 * last moments are lost; the facts are not (task_events in PostgreSQL, which clients re-read by cursor).
 */
export const layerMemory: Layer.Layer<EventQueue> = Layer.sync(EventQueue, () => {
  const groups = new Map<string, Queue.Queue<OutgoingMessage>>()
  // published before any consumer started (the relay can be first at start-up): kept for the first group
  let early: Array<OutgoingMessage> = []
  const queueOf = (group: string) =>
    Effect.suspend(() => {
      const existing = groups.get(group)
      if (existing !== undefined) return Effect.succeed(existing)
      const q = Effect.runSync(Queue.unbounded<OutgoingMessage>())
      groups.set(group, q)
      const backlog = early
      early = []
      return Effect.as(Queue.offerAll(q, backlog), q)
    })

  return EventQueue.of({
    ping: Effect.void,
    publish: (messages) =>
      Effect.suspend(() => {
        if (groups.size === 0) early.push(...messages)
        return Effect.forEach([...groups.values()], (q) => Queue.offerAll(q, messages), { discard: true })
      }),
    consume: (group, handle) =>
      Effect.gen(function*() {
        const q = yield* queueOf(group)
        // one delivery per group a round; a failed one is retried (with backoff) before its round's successors
        const deliverRound = (round: ReadonlyArray<OutgoingMessage>) =>
          Effect.gen(function*() {
            let pending = round.map((m): Delivery => ({ key: m.key, eventId: m.eventId, body: m.body, attempt: 1 }))
            while (pending.length > 0) {
              const ok = yield* handle(pending)
              pending = pending.filter((_, i) => !ok[i]).map((d) => ({ ...d, attempt: d.attempt + 1 }))
              if (pending.length > 0) {
                yield* Effect.sleep(
                  backoff(pending[0]!.attempt - 2, { base: Duration.millis(100), cap: Duration.seconds(5) })
                )
              }
            }
          })
        yield* Queue.takeBetween(q, 1, 256).pipe(
          Effect.flatMap((batch) => {
            const groups = groupsOf([...batch], (m) => m.group)
            const rounds = Math.max(...groups.map((g) => g.length))
            return Effect.forEach(
              Array.from({ length: rounds }, (_, r) => groups.flatMap((g) => (r < g.length ? [g[r]!] : []))),
              deliverRound,
              { discard: true }
            )
          }),
          Effect.forever,
          Effect.forkScoped
        )
      })
  })
})
