import { execFileSync } from "node:child_process"
import { Producer, SimpleConsumer } from "rocketmq-client-nodejs"
import { ownCpuMsSince, sleep } from "./support.js"

/** The RocketMQ client alone, no code of ours: the ceiling of the propagation benches' queue hop. */

const quiet = { info: () => {}, warn: () => {}, error: () => {} }

/** A started producer on `topic` and a started SimpleConsumer of it in `group` (5 s long polls, as the dispatcher's). */
export const ceilingClients = async (endpoints: string, topic: string, group: string) => {
  const producer = new Producer({ endpoints, namespace: "", topics: [topic], logger: quiet })
  const consumer = new SimpleConsumer({
    endpoints,
    namespace: "",
    consumerGroup: group,
    awaitDuration: 5000,
    subscriptions: new Map([[topic, "*"]]),
    logger: quiet
  })
  await producer.startup()
  await consumer.startup()
  return { producer, consumer }
}

/**
 * The client at `rate` messages/s for `seconds` on a FIFO topic and group made for it (dropped after): every 20 ms the
 * messages due (`message(n)`: body and message group), sent side by side as the relay sends a commit's rows, while
 * `receivers` receives of 32 are in flight, each message acked, as the dispatcher does. Returns how many were sent,
 * each received message's (sent at, send → receive ms), and this process's CPU (ms, all threads) from the first send
 * to the last receive: the client's own cost of sending and receiving them.
 */
export const clientAtRate = async (options: {
  readonly endpoints: string
  readonly topic: string
  readonly group: string
  readonly rate: number
  readonly seconds: number
  readonly receivers: number
  readonly message: (n: number) => { readonly body: string; readonly group: string }
}) => {
  const { group, rate, receivers, seconds, topic } = options
  execFileSync("scripts/rocketmq.sh", ["topic", topic, group], { stdio: "inherit" })
  const { producer, consumer } = await ceilingClients(options.endpoints, topic, group)
  const sentAt = new Map<string, number>()
  const samples: Array<readonly [number, number]> = []
  let receiving = true
  const receiveLoop = async () => {
    while (receiving) {
      const messages = await consumer.receive(32, 30_000).catch(() => [])
      const at = performance.now()
      for (const m of messages) {
        const id = m.properties.get("n")
        const t = id === undefined ? undefined : sentAt.get(id)
        if (t !== undefined) samples.push([t, at - t])
      }
      await Promise.all(messages.map((m) => consumer.ack(m).catch(() => undefined)))
    }
  }
  const loops = Array.from({ length: receivers }, receiveLoop)
  let s = 0
  const started = performance.now()
  const cpuBefore = process.cpuUsage()
  const pending: Array<Promise<unknown>> = []
  while (performance.now() - started < seconds * 1000) {
    const due = Math.floor(((performance.now() - started) / 1000) * rate) - s
    if (due <= 0) {
      await sleep(20)
      continue
    }
    for (let i = 0; i < due; i++) {
      s++
      const n = String(s)
      const m = options.message(s)
      sentAt.set(n, performance.now())
      pending.push(
        producer.send({
          topic,
          body: Buffer.from(m.body),
          keys: [m.group],
          messageGroup: m.group,
          properties: new Map([["n", n]])
        }).catch(() => undefined)
      )
    }
  }
  await Promise.all(pending)
  const deadline = performance.now() + 30_000
  while (samples.length < s && performance.now() < deadline) await sleep(100)
  const cpuMs = ownCpuMsSince(cpuBefore)
  receiving = false
  await Promise.race([Promise.all(loops), sleep(6000)])
  await producer.shutdown().catch(() => undefined)
  await consumer.shutdown().catch(() => undefined)
  execFileSync("scripts/rocketmq.sh", ["drop", topic, group], { stdio: "inherit" })
  return { sent: s, samples, cpuMs }
}
