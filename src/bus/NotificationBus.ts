import { Context, Duration, Effect, Layer, Metric, Option, Queue, Schema, type Scope } from "effect"
import type { Redis as IORedis } from "ioredis"
import * as S from "../config/Settings.js"
import { busPublishSeconds } from "../observability/metrics.js"
import { labelled } from "../observability/series.js"
import { duplicate, Redis } from "../redis/Redis.js"
import { promiseWithin } from "../runtime/timers.js"

export class BusUnavailable extends Schema.TaggedError<BusUnavailable>()("BusUnavailable", {
  message: Schema.String
}) {}

/** What a subscriber sees: a message, or a notice that messages may have been missed (resubscribed after a disconnect). */
export type BusEvent = { readonly _tag: "Message"; readonly payload: string } | { readonly _tag: "Gap" }

/**
 * Live fan-out of committed task events to the HTTP gateways. Only an accelerator: PostgreSQL stays the truth, and a
 * Gap tells a subscriber to re-read from its cursor.
 */
/** One message for `publishMany`. */
export interface BusMessage {
  readonly projectId: string
  readonly payload: string
}

export class NotificationBus extends Context.Tag("NotificationBus")<NotificationBus, {
  readonly publish: (projectId: string, payload: string) => Effect.Effect<void, BusUnavailable>
  /**
   * Publishes a batch in one round trip (a Redis pipeline); answers, per message in order, undefined when it was
   * published or the error that kept it back.
   */
  readonly publishMany: (
    messages: ReadonlyArray<BusMessage>
  ) => Effect.Effect<ReadonlyArray<BusUnavailable | undefined>>
  /**
   * Subscribes to a project's channel for as long as the scope lives; many local subscribers of one project share
   * one Redis subscription (ref-counted: SUBSCRIBE on the first, UNSUBSCRIBE when the last scope closes).
   */
  readonly subscribe: (projectId: string) => Effect.Effect<Queue.Dequeue<BusEvent>, never, Scope.Scope>
  /**
   * The same subscription with a callback instead of a queue, for plain code that must not hold a fiber or a Scope
   * per channel (the gateway's project feeds): `onEvent` is called synchronously as each message arrives, a Gap
   * included. Succeeds once the channel is live (or known not to be: a Gap follows); the returned function ends it.
   */
  readonly listen: (projectId: string, onEvent: (event: BusEvent) => void) => Effect.Effect<() => void>
  /** Whether subscribers are receiving what is published now (false while the subscriber connection is down). */
  readonly healthy: Effect.Effect<boolean>
}>() {}

const PUBLISH_TIMEOUT = Duration.millis(500)
const SUBSCRIBE_TIMEOUT = Duration.seconds(2)
const GAP: BusEvent = { _tag: "Gap" }

export const BusSettings = S.area("Bus", "live fan-out of task events to this runner's streams", {
  subscriberBuffer: S.integer(
    "BUS_SUBSCRIBER_BUFFER",
    "messages buffered per local subscriber; past it the subscriber gets a Gap and re-reads from its cursor",
    1024,
    { min: 1 }
  )
})

const bufferSize = Effect.map(BusSettings.config, (c) => c.subscriberBuffer)

/**
 * One local subscriber. Its queue holds `capacity` messages plus one slot that only a Gap may take, so a full
 * buffer can always say that it dropped something, and a Gap in the last slot covers every drop after it.
 */
interface Subscriber {
  readonly queue: Queue.Queue<BusEvent>
  /** a Gap is owed before the next event (the connection dropped, or subscribing failed) */
  missed: boolean
  lastWasGap: boolean
}

/** A callback subscriber (`listen`): it has no buffer, it is called as messages arrive. */
interface Listener {
  readonly onEvent: (event: BusEvent) => void
  missed: boolean
}

/** Local fan-out by key: never blocks, whatever a subscriber's pace. */
const makeHub = (capacity: number) => {
  const keys = new Map<string, Set<Subscriber | Listener>>()
  const pushGap = (sub: Subscriber, size: number) => {
    // the last event offered is still queued and is a Gap already: it covers this one too
    if (size > 0 && sub.lastWasGap) return size
    Queue.unsafeOffer(sub.queue, GAP)
    sub.lastWasGap = true
    return size + 1
  }
  /** Offers a message (or, with none, only an owed Gap); a full buffer drops it and queues a Gap instead. */
  const deliver = (sub: Subscriber | Listener, payload?: string) => {
    if ("onEvent" in sub) {
      if (sub.missed) {
        sub.missed = false
        sub.onEvent(GAP)
      }
      if (payload !== undefined) sub.onEvent({ _tag: "Message", payload })
      return
    }
    const current = sub.queue.unsafeSize()
    if (Option.isNone(current)) return // shut down
    let size = current.value
    if (sub.missed) {
      sub.missed = false
      size = pushGap(sub, size)
    }
    if (payload === undefined) return
    if (size < capacity) {
      Queue.unsafeOffer(sub.queue, { _tag: "Message", payload })
      sub.lastWasGap = false
    } else {
      pushGap(sub, size) // the message is dropped
    }
  }
  return {
    keys,
    publish: (key: string, payload: string) => keys.get(key)?.forEach((sub) => deliver(sub, payload)),
    deliver,
    /**
     * Adds a subscriber for the scope's lifetime. `onLast` is called in the same step that removes the key's last
     * subscriber (so that no one joins in between), and the effect it returns is awaited.
     */
    join: (key: string, onLast: () => Effect.Effect<void>) =>
      Effect.gen(function*() {
        const queue = yield* Queue.bounded<BusEvent>(capacity + 1)
        const sub: Subscriber = { queue, missed: false, lastWasGap: false }
        yield* Effect.acquireRelease(
          Effect.sync(() => keys.set(key, (keys.get(key) ?? new Set()).add(sub))),
          () =>
            Effect.suspend(() => {
              const subs = keys.get(key)
              subs?.delete(sub)
              if (subs?.size !== 0) return Effect.void
              keys.delete(key)
              return onLast()
            }).pipe(Effect.ensuring(Queue.shutdown(queue)))
        )
        return { sub, queue: queue as Queue.Dequeue<BusEvent> }
      }),
    /** Adds a callback subscriber; the function returned removes it (and `onLast` runs if it was the last one). */
    listen: (key: string, onEvent: (event: BusEvent) => void, onLast: () => void) => {
      const listener: Listener = { onEvent, missed: false }
      keys.set(key, (keys.get(key) ?? new Set()).add(listener))
      let removed = false
      const remove = () => {
        if (removed) return
        removed = true
        const subs = keys.get(key)
        subs?.delete(listener)
        if (subs?.size !== 0) return
        keys.delete(key)
        onLast()
      }
      return { listener, remove }
    }
  }
}

/** In-process bus for a single process (no REDIS_URL): the same buffers and Gaps, no connection to lose. */
export const layerMemory: Layer.Layer<NotificationBus> = Layer.effect(
  NotificationBus,
  Effect.gen(function*() {
    const hub = makeHub(yield* bufferSize)
    return NotificationBus.of({
      publish: Effect.fn("NotificationBus.publish")(function*(projectId: string, payload: string) {
        yield* Effect.sync(() => hub.publish(projectId, payload))
      }),
      publishMany: (messages) =>
        Effect.sync(() =>
          messages.map((m) => {
            hub.publish(m.projectId, m.payload)
            return undefined
          })
        ),
      subscribe: Effect.fn("NotificationBus.subscribe")(function*(projectId: string) {
        return (yield* hub.join(projectId, () => Effect.void)).queue
      }),
      listen: (projectId, onEvent) => Effect.sync(() => hub.listen(projectId, onEvent, () => undefined).remove),
      healthy: Effect.succeed(true)
    })
  }).pipe(Effect.orDie)
)

const attempt = (what: string, run: () => Promise<unknown>, timeout: Duration.Duration) =>
  promiseWithin(run, {
    timeout,
    onError: (e) => new BusUnavailable({ message: `${what}: ${String(e)}` }),
    onTimeout: () => new BusUnavailable({ message: `${what}: timed out` })
  })

/**
 * Redis Pub/Sub: PUBLISH on the shared connection, SUBSCRIBE on a dedicated one (a connection in subscriber mode
 * runs no other command). ioredis' own resubscription is off: it would only restore channels whose SUBSCRIBE had
 * been answered, and we need to know when the channels are live again to send the Gaps, so the "ready" handler
 * subscribes to every channel that has local subscribers itself.
 */
export const layerRedis: Layer.Layer<NotificationBus, never, Redis> = Layer.scoped(
  NotificationBus,
  Effect.gen(function*() {
    const { client, keyPrefix } = yield* Redis
    if (Option.isNone(client)) {
      return yield* Effect.dieMessage("NotificationBus.layerRedis needs REDIS_URL or REDIS_SENTINELS")
    }
    const publisher: IORedis = client.value
    const hub = makeHub(yield* bufferSize)
    const connection = yield* duplicate(publisher, "bus-subscriber", { autoResubscribe: false })
    const channelOf = (projectId: string) => `${keyPrefix}project:${projectId}`
    const published = {
      ok: labelled(busPublishSeconds, { outcome: "ok" }),
      failed: labelled(busPublishSeconds, { outcome: "failed" })
    }
    // the SUBSCRIBE that made each channel live on the current connection: later subscribers wait for it too
    const live = new Map<string, Promise<unknown>>()
    const subscribe = (channels: Array<string>) => {
      const subscribing = connection.subscribe(...channels)
      subscribing.catch(() => undefined) // awaited by whoever needs it
      channels.forEach((channel) => live.set(channel, subscribing))
      return subscribing
    }

    // emitter callbacks run outside any fiber: they only touch the hub and wake the fiber that logs and resubscribes
    const events = yield* Queue.unbounded<"lost" | "ready">()
    let up = connection.status === "ready"
    connection.on("message", (channel: string, payload: string) => hub.publish(channel, payload))
    connection.on("close", () => {
      // everyone subscribed now misses what is published until the channels are live again
      live.clear()
      hub.keys.forEach((subs) => subs.forEach((sub) => (sub.missed = true)))
      if (up) Queue.unsafeOffer(events, "lost")
      up = false
    })
    connection.on("ready", () => {
      up = true
      Queue.unsafeOffer(events, "ready")
    })
    yield* Effect.gen(function*() {
      if ((yield* Queue.take(events)) === "lost") {
        return yield* Effect.logWarning("NotificationBus: subscriber connection lost, subscribers will get a Gap")
      }
      const channels = [...hub.keys.keys()]
      if (channels.length === 0) return
      const subscribing = subscribe(channels)
      yield* attempt("resubscribe", () => subscribing, SUBSCRIBE_TIMEOUT).pipe(
        Effect.zipRight(Effect.sync(() => hub.keys.forEach((subs) => subs.forEach((sub) => hub.deliver(sub))))),
        Effect.zipRight(Effect.logInfo("NotificationBus: resubscribed, Gap sent")),
        Effect.tapError((e) =>
          Effect.logWarning("NotificationBus: resubscribing failed").pipe(
            Effect.annotateLogs({ error: e.message }),
            Effect.zipRight(Effect.sleep(SUBSCRIBE_TIMEOUT)), // still up (a timeout)? then try again
            Effect.zipRight(Effect.sync(() => up && Queue.unsafeOffer(events, "ready")))
          )
        ),
        Effect.ignore,
        Effect.annotateLogs({ channels: channels.length })
      )
    }).pipe(Effect.forever, Effect.forkScoped)

    // the last local subscriber of a channel is gone (a listener does not wait for the UNSUBSCRIBE: a later SUBSCRIBE
    // is queued behind it on the same connection)
    const unsubscribe = (channel: string) => {
      live.delete(channel)
      const unsubscribing = connection.unsubscribe(channel)
      unsubscribing.catch(() => undefined)
      return unsubscribing
    }
    /**
     * SUBSCRIBEs asked for in the same turn of the event loop go as one command: a reconnect storm starts a feed for
     * every project at once, and a command (and a socket write) each was a tenth of what such an open cost. A channel
     * that lost its last local subscriber meanwhile is left out (its UNSUBSCRIBE went first).
     */
    let queued: { readonly channels: Array<string>; readonly subscribing: Promise<unknown> } | undefined
    const subscribeSoon = (channel: string): Promise<unknown> => {
      if (queued === undefined) {
        const channels: Array<string> = []
        const subscribing: Promise<unknown> = new Promise((resolve) => setImmediate(resolve)).then(() => {
          queued = undefined
          const wanted = channels.filter((c) => hub.keys.has(c) && live.get(c) === subscribing)
          return wanted.length === 0 ? undefined : subscribe(wanted)
        })
        subscribing.catch(() => undefined) // awaited by whoever needs it
        queued = { channels, subscribing }
      }
      queued.channels.push(channel)
      live.set(channel, queued.subscribing)
      return queued.subscribing
    }
    /** Waits until `channel` is live for `sub`; if it cannot be now (Redis down), `sub` is owed a Gap. */
    const live_ = (projectId: string, channel: string, sub: { missed: boolean }) => {
      const subscribing = live.get(channel) ?? subscribeSoon(channel)
      // not live (Redis down): the Gap comes once the "ready" handler has subscribed again
      return attempt("subscribe", () => subscribing, SUBSCRIBE_TIMEOUT).pipe(
        Effect.tapError((e) =>
          Effect.sync(() => {
            sub.missed = true
            if (live.get(channel) === subscribing) live.delete(channel) // the next subscriber tries again
          }).pipe(
            Effect.zipRight(Effect.logWarning("NotificationBus: subscribing failed")),
            Effect.annotateLogs({ error: e.message })
          )
        ),
        Effect.ignore,
        Effect.annotateLogs({ project_id: projectId })
      )
    }

    return NotificationBus.of({
      publish: Effect.fn("NotificationBus.publish")(function*(projectId: string, payload: string) {
        const publish = attempt("publish", () => publisher.publish(channelOf(projectId), payload), PUBLISH_TIMEOUT)
        const [took, sent] = yield* Effect.timed(Effect.either(publish))
        yield* Metric.update(published[sent._tag === "Right" ? "ok" : "failed"], Duration.toSeconds(took))
        if (sent._tag === "Left") return yield* sent.left
      }),
      publishMany: Effect.fn("NotificationBus.publishMany")(function*(messages: ReadonlyArray<BusMessage>) {
        const pipeline = publisher.pipeline(messages.map((m) => ["publish", channelOf(m.projectId), m.payload]))
        const [took, sent] = yield* Effect.timed(
          Effect.either(attempt("publish", () => pipeline.exec(), PUBLISH_TIMEOUT))
        )
        const seconds = Duration.toSeconds(took)
        if (sent._tag === "Left") {
          yield* Metric.update(published.failed, seconds)
          return messages.map(() => sent.left)
        }
        // exec answers [error, reply] per command
        const answers = (sent.right ?? []) as ReadonlyArray<readonly [Error | null, unknown]>
        const outcomes = messages.map((_, i) => {
          const error = answers[i]?.[0]
          return error === null ? undefined : new BusUnavailable({ message: `publish: ${String(error ?? "no reply")}` })
        })
        for (const o of outcomes) yield* Metric.update(published[o === undefined ? "ok" : "failed"], seconds)
        return outcomes
      }),
      subscribe: Effect.fn("NotificationBus.subscribe")(function*(projectId: string) {
        const channel = channelOf(projectId)
        const { queue, sub } = yield* hub.join(
          channel,
          () => attempt("unsubscribe", () => unsubscribe(channel), SUBSCRIBE_TIMEOUT).pipe(Effect.ignore)
        )
        yield* live_(projectId, channel, sub)
        return queue
      }),
      listen: (projectId, onEvent) =>
        Effect.suspend(() => {
          const channel = channelOf(projectId)
          const { listener, remove } = hub.listen(channel, onEvent, () => void unsubscribe(channel))
          return Effect.as(live_(projectId, channel, listener), remove)
        }),
      healthy: Effect.sync(() => up)
    })
  }).pipe(Effect.orDie)
)

/** Redis when REDIS_URL or REDIS_SENTINELS is configured, the in-process bus otherwise. */
export const layerFromEnv: Layer.Layer<NotificationBus, never, Redis> = Layer.unwrapEffect(
  Effect.map(Redis, ({ client }) => Option.isSome(client) ? layerRedis : layerMemory)
)
