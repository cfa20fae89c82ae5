/**
 * The RocketMQ adapter's own cases. Imported by test/propagation.test.ts, so that they run in the same file (one
 * worker, in order) as the test that stops the broker: test files run in parallel.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Duration, Effect, Exit, Logger, LogLevel, Schedule } from "effect"
import { execFile } from "node:child_process"
import { fileURLToPath } from "node:url"
import {
  type Delivery,
  eachDelivery,
  type EventQueue,
  type OutgoingMessage,
  QueueUnavailable
} from "../../src/queue/EventQueue.js"
import { makeRocketMQQueue } from "../../src/queue/RocketMQQueue.js"
import { scaledDuration, services } from "./env.js"

/** Like DATABASE_URL: without ROCKETMQ_ENDPOINTS the tests are skipped locally, and must not be in CI (env.ts). */
const endpoints = services.rocketmqEndpoints

const script = fileURLToPath(new URL("../../scripts/rocketmq.sh", import.meta.url))
const unique = () => `test-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`

const rocketmqSh = (...args: ReadonlyArray<string>) =>
  Effect.async<void, Error>((resume) => {
    execFile(script, args, (error, _stdout, stderr) =>
      resume(error === null ? Effect.void : Effect.fail(new Error(`rocketmq.sh ${args.join(" ")}: ${stderr}`))))
  })

/** A FIFO topic and orderly consumer group of the test's own (the client needs both to exist), dropped afterwards. */
const makeTopic = Effect.acquireRelease(
  Effect.suspend(() => {
    const topic = unique()
    const group = `${topic}-consumer`
    return rocketmqSh("topic", topic, group).pipe(Effect.as({ topic, group }))
  }),
  ({ group, topic }) => Effect.orDie(rocketmqSh("drop", topic, group))
)

const queueOn = (topic: string) =>
  makeRocketMQQueue({ endpoints: endpoints!, topic }).pipe(Effect.provide(Logger.minimumLogLevel(LogLevel.Error)))

const messagesOf = (groups: ReadonlyArray<string>, perGroup: number): Array<OutgoingMessage> =>
  Array.from(
    { length: perGroup },
    (_, i) =>
      groups.map((g) => ({ key: g, group: g, eventId: `${g}-${i}`, body: JSON.stringify({ group: g, seq: i }) }))
  ).flat()

/** Publishes in batches of 10, retrying while the producer is still connecting. */
const publishAll = (queue: Context.Tag.Service<EventQueue>, messages: ReadonlyArray<OutgoingMessage>) =>
  Effect.forEach(
    Array.from({ length: Math.ceil(messages.length / 10) }, (_, i) => messages.slice(i * 10, i * 10 + 10)),
    (batch) => queue.publish(batch).pipe(Effect.retry(Schedule.spaced("200 millis").pipe(Schedule.upTo("20 seconds")))),
    { discard: true }
  )

/** Retries an assertion until it holds (or fails with its last error after `within`). */
const eventually = (check: () => void, within: Duration.DurationInput = "30 seconds") =>
  Effect.try(check).pipe(
    Effect.retry(Schedule.spaced("100 millis").pipe(Schedule.upTo(scaledDuration(within)))),
    Effect.orDie
  )

describe.skipIf(endpoints === undefined)("RocketMQ event queue", () => {
  it.live("delivers every message once, in order per group, one at a time per group", () =>
    Effect.gen(function*() {
      const { group, topic } = yield* makeTopic
      const queue = yield* queueOn(topic)
      const groups = ["task-a", "task-b", "task-c"]
      const delivered = new Map<string, Array<string>>(groups.map((g) => [g, []]))
      const inFlight = new Map<string, number>()
      let overlaps = 0
      yield* queue.consume(
        group,
        eachDelivery((d: Delivery) =>
          Effect.gen(function*() {
            const now = (inFlight.get(d.key) ?? 0) + 1
            inFlight.set(d.key, now)
            if (now > 1) overlaps++
            yield* Effect.sleep("2 millis")
            delivered.get(d.key)!.push(d.eventId)
            inFlight.set(d.key, now - 1)
          })
        )
      )
      const messages = messagesOf(groups, 20)
      yield* publishAll(queue, messages)

      yield* eventually(() => expect([...delivered.values()].map((ids) => ids.length)).toEqual([20, 20, 20]))
      yield* Effect.sleep("1 second") // nothing more (no duplicates) arrives
      for (const g of groups) {
        expect(delivered.get(g)).toEqual(messages.filter((m) => m.group === g).map((m) => m.eventId))
      }
      expect(overlaps).toBe(0)
    }).pipe(Effect.scoped))

  it.live("redelivers a failed message as attempt 2 and holds its group's later messages until then", () =>
    Effect.gen(function*() {
      const { group, topic } = yield* makeTopic
      const queue = yield* queueOn(topic)
      const log: Array<{ readonly eventId: string; readonly attempt: number; readonly ok: boolean }> = []
      let failed = false
      yield* queue.consume(
        group,
        eachDelivery((d: Delivery) =>
          Effect.suspend(() => {
            const fail = d.eventId === "task-a-1" && !failed
            failed ||= fail
            log.push({ eventId: d.eventId, attempt: d.attempt, ok: !fail })
            return fail ? Effect.fail("handler failed") : Effect.void
          })
        )
      )
      const messages = messagesOf(["task-a", "task-b"], 5)
      yield* publishAll(queue, messages)

      const succeeded = () => new Set(log.filter((e) => e.ok).map((e) => e.eventId))
      yield* eventually(() => expect(succeeded().size).toBe(messages.length))

      const a = log.filter((e) => e.eventId.startsWith("task-a"))
      const firstTry = a.findIndex((e) => e.eventId === "task-a-1")
      const retry = a.findIndex((e) => e.eventId === "task-a-1" && e.ok)
      expect(a[firstTry]).toEqual({ eventId: "task-a-1", attempt: 1, ok: false })
      expect(a[retry]!.attempt).toBe(2)
      // nothing of task-a after task-a-1 ran between its failure and its redelivery
      expect(a.slice(firstTry + 1, retry)).toEqual([])
      // first successes of task-a in publish order (other groups may see redeliveries: consumers de-duplicate)
      const firstSuccesses = [...new Set(a.filter((e) => e.ok).map((e) => e.eventId))]
      expect(firstSuccesses).toEqual(["task-a-0", "task-a-1", "task-a-2", "task-a-3", "task-a-4"])
    }).pipe(Effect.scoped))
})

describe("RocketMQ event queue without a broker", () => {
  it.live("starts anyway, publish fails with QueueUnavailable, and it closes promptly", () =>
    Effect.gen(function*() {
      const started = Date.now()
      const exit = yield* Effect.gen(function*() {
        const queue = yield* makeRocketMQQueue({ endpoints: "127.0.0.1:1", topic: "nowhere" }).pipe(
          Effect.provide(Logger.minimumLogLevel(LogLevel.None))
        )
        yield* queue.consume("nobody", eachDelivery(() => Effect.void))
        yield* Effect.sleep("1 second")
        return yield* Effect.exit(queue.publish([{ key: "k", group: "k", eventId: "e", body: "{}" }]))
      }).pipe(Effect.scoped)
      expect(exit).toEqual(Exit.fail(new QueueUnavailable({ message: "RocketMQ is not connected yet" })))
      expect(Date.now() - started).toBeLessThan(10_000)
    }))
})
