import { Effect, Layer, Option } from "effect"
import * as Bus from "../bus/NotificationBus.js"
import type { EventQueue } from "../queue/EventQueue.js"
import { layerMemory as queueMemory } from "../queue/MemoryQueue.js"
import { layerRocketMQ, QueueSettings } from "../queue/RocketMQQueue.js"
import * as Redis from "../redis/Redis.js"
import { NotificationDispatcherLive } from "./NotificationDispatcher.js"
import { OutboxRelayLive } from "./OutboxRelay.js"

/** RocketMQ when ROCKETMQ_ENDPOINTS is set, the in-process queue otherwise (`npm start` on a bare machine). */
export const layerEventQueueFromEnv: Layer.Layer<EventQueue> = Layer.unwrapEffect(
  Effect.map(
    Effect.orDie(QueueSettings.config),
    ({ endpoints }) => Option.isSome(endpoints) && endpoints.value.length > 0 ? layerRocketMQ : queueMemory
  )
)

/**
 * The outbox relay (a cluster singleton) and the notification dispatcher, on the given queue and bus; the bus
 * stays available to the runner's event gateways.
 */
export const layerPropagationWith = <E, R>(
  queue: Layer.Layer<EventQueue, E, R>,
  bus: Layer.Layer<Bus.NotificationBus>
) => Layer.mergeAll(OutboxRelayLive, NotificationDispatcherLive).pipe(Layer.provide(queue), Layer.provideMerge(bus))

/** From the environment: RocketMQ and Redis when configured, their in-process stand-ins otherwise. */
export const layerPropagationFromEnv = layerPropagationWith(
  layerEventQueueFromEnv,
  Bus.layerFromEnv.pipe(Layer.provide(Redis.layerFromEnv))
)

/** Both in process: for tests of other parts and for one machine without RocketMQ or Redis. */
export const layerPropagationMemory = layerPropagationWith(queueMemory, Bus.layerMemory)
