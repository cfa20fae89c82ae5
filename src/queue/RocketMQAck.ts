import { Effect, type Scope } from "effect"
import type { MessageView, SimpleConsumer } from "rocketmq-client-nodejs"
import definition from "rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb.js"
import service from "rocketmq-client-nodejs/proto/apache/rocketmq/v2/service_pb.js"

/** The client's own request timeout (its default; the consumers here do not set one). */
const ACK_TIMEOUT_MS = 3000

/**
 * Acks a consumer's messages with one AckMessage request per broker and topic (the protocol takes many entries; the
 * client's `ack` sends one each). A FIFO queue stays locked until every message popped from it is acked, so one
 * round's acks are one round trip instead of as many as the round holds, each through the proxy's consumer pool.
 * Answers the messages not acked, with why (they come back after their invisible duration); never fails.
 */
export const ackAll = (
  consumer: SimpleConsumer,
  group: string,
  messages: ReadonlyArray<MessageView>
): Effect.Effect<ReadonlyArray<{ readonly message: MessageView; readonly error: string }>> => {
  const requests = new Map<string, Array<MessageView>>()
  for (const m of messages) {
    const key = `${m.endpoints.facade}\u0000${m.topic}`
    const list = requests.get(key)
    if (list === undefined) requests.set(key, [m])
    else list.push(m)
  }
  return Effect.forEach(requests.values(), (batch) => {
    const first = batch[0]!
    const request = new service.AckMessageRequest()
      .setGroup(new definition.Resource().setName(group))
      .setTopic(new definition.Resource().setName(first.topic))
    for (const m of batch) request.addEntries().setMessageId(m.messageId).setReceiptHandle(m.receiptHandle)
    return Effect.tryPromise(() => consumer.ackMessageViaRpc(first.endpoints, request, ACK_TIMEOUT_MS)).pipe(
      Effect.map((response) => {
        const failed = new Map<string, string>()
        for (const entry of response.getEntriesList()) {
          const status = entry.getStatus()
          const code = status?.getCode()
          if (code !== definition.Code.OK) failed.set(entry.getMessageId(), `${code}: ${status?.getMessage() ?? ""}`)
        }
        // no entries in the answer: the request's own status speaks for all of them
        const status = response.getStatus()
        const whole = response.getEntriesList().length === 0 && status?.getCode() !== definition.Code.OK
          ? `${status?.getCode()}: ${status?.getMessage() ?? ""}`
          : undefined
        return batch.flatMap((message) => {
          const error = whole ?? failed.get(message.messageId)
          return error === undefined ? [] : [{ message, error }]
        })
      }),
      Effect.catchAll((cause) => Effect.succeed(batch.map((message) => ({ message, error: String(cause) }))))
    )
  }, { concurrency: "unbounded" }).pipe(Effect.map((failed) => failed.flat()))
}

/**
 * Sends a round's ack while its receiver goes on to ask for the next messages (a round trip less per receive): the
 * answer returns once the ack is out, not done. At most `limit` acks are out at a time (the consumer's receivers); they run
 * in the scope, uninterruptibly, so a stopping consumer waits for them (each bounded by its request's deadline)
 * before the client shuts down. Order holds: the broker hands out a group's next message only once this one is acked,
 * however soon the next receive asks.
 */
export const makeAckBehind = <A>(
  limit: number,
  ack: (messages: ReadonlyArray<A>) => Effect.Effect<void>
): Effect.Effect<(messages: ReadonlyArray<A>) => Effect.Effect<void, never, Scope.Scope>> =>
  Effect.map(
    Effect.makeSemaphore(limit),
    (out) => (messages) =>
      Effect.zipRight(out.take(1), Effect.forkScoped(Effect.ensuring(ack(messages), out.release(1)))).pipe(
        Effect.uninterruptible,
        Effect.asVoid
      )
  )
