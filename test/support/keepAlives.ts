import { Entity, type Message } from "@effect/cluster"

/** The keep-alive an entity hands itself (src/entities/inMemoryKeepAlive.ts), as Sharding.send sees it. */
export const isKeepAlive = (message: Message.Incoming<any>) =>
  message._tag !== "IncomingEnvelope" && message.envelope.tag === Entity.KeepAliveRpc._tag

/** Answers a keep-alive at once, as an entity manager does for one it does not count as held. */
export const answerKeepAlive = (message: Message.Incoming<any>) =>
  (message as unknown as Message.OutgoingRequest<any>).respond(undefined as never)
