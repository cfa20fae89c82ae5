import { SqlClient } from "@effect/sql"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Context, Duration, Effect, Exit, Layer, Schedule, Scope } from "effect"
import { execFileSync, spawnSync } from "node:child_process"
import { Producer } from "rocketmq-client-nodejs"
import * as Bus from "../../src/bus/NotificationBus.js"
import { listDeadLetters } from "../../src/propagation/DeadLetters.js"
import { layerPropagationWith } from "../../src/propagation/Propagation.js"
import { layerRocketMQ } from "../../src/queue/RocketMQQueue.js"
import * as Redis from "../../src/redis/Redis.js"
import type { TaskId } from "../../src/schema/ids.js"
import { makeTestDatabaseUrl, noDatabase } from "../support/database.js"
import { scaled, scaledDuration, services } from "../support/env.js"
import { listen, type RunnerServices, taskWithHistory, until, versionsByTask } from "../support/propagation.js"
import { startScopedRunner } from "../support/runner.js"
import { commitChange } from "../support/streams.js"
import { uuid } from "../support/tasks.js"
import "../support/rocketmqQueueCases.js"
import { startTcpProxy } from "../support/tcpProxy.js"

/**
 * Propagation on the real services: outbox → RocketMQ 5 → dispatcher → Redis Pub/Sub. Every test that needs the
 * broker is in this one file, because one of them stops the broker for 30 s (files run in parallel).
 */
const endpoints = services.rocketmqEndpoints
const redisUrl = services.redisUrl
const skip = noDatabase || endpoints === undefined || redisUrl === undefined

const suffix = uuid().slice(0, 8)
const topic = `test-events-${suffix}`
const group = `test-dispatcher-${suffix}`
const prefix = `test-${suffix}:`
const settings = {
  ROCKETMQ_ENDPOINTS: endpoints ?? "",
  ROCKETMQ_TOPIC: topic,
  DISPATCHER_GROUP: group,
  OUTBOX_SWEEP_INTERVAL: "500 millis",
  OUTBOX_MAX_BACKOFF: "2 seconds"
}
const rocketmq = (...args: Array<string>) =>
  execFileSync("scripts/rocketmq.sh", args, { stdio: "pipe", timeout: scaled(300_000) })

let redisProxy: Awaited<ReturnType<typeof startTcpProxy>> | undefined
beforeAll(async () => {
  if (skip) return
  rocketmq("topic", topic, group)
  const target = new URL(redisUrl!)
  redisProxy = await startTcpProxy(Number(target.port || 6379), target.hostname)
}, scaled(300_000))
afterAll(async () => {
  await redisProxy?.close()
  if (!skip) rocketmq("drop", topic, group)
})

/** Everything Redis-side goes through a proxy, so a test can cut Redis off (as a restart would) without stopping it. */
const proxiedRedis = () => Redis.layer(`redis://127.0.0.1:${redisProxy!.port}`, prefix)
const propagation = () => layerPropagationWith(layerRocketMQ, Bus.layerRedis.pipe(Layer.provide(proxiedRedis())))

/** A runner on a fresh database, and a subscriber to a new project's channel. */
const startWithSubscriber = Effect.gen(function*() {
  const { url } = yield* makeTestDatabaseUrl
  const runner = yield* startScopedRunner(url, propagation(), settings)
  const projectId = uuid()
  const bus = yield* listen(yield* Subscriber, projectId)
  const inRunner = <X, E>(eff: Effect.Effect<X, E, RunnerServices>) => Effect.provide(eff, runner.context)
  return { url, runner, projectId, bus, inRunner }
})

class Subscriber extends Context.Tag("Subscriber")<Subscriber, Bus.NotificationBus["Type"]>() {}
const subscriberBus = () =>
  Layer.effect(Subscriber, Bus.NotificationBus).pipe(
    Layer.provide(Bus.layerRedis),
    Layer.provide(proxiedRedis())
  )

describe.skipIf(skip)("event propagation: outbox → RocketMQ → dispatcher → Redis", () => {
  it.live(
    "every committed event reaches the project's channel once, in order per task; redeliveries are dropped; the relay moves when its runner stops",
    () =>
      Effect.gen(function*() {
        const { bus, inRunner: inA, projectId, runner: a, url } = yield* startWithSubscriber

        const first = yield* Effect.forEach(Array.from({ length: 8 }), () => inA(taskWithHistory(projectId)), {
          concurrency: 8
        })
        yield* until("32 events", () => bus.seen.length >= 32)
        for (const id of first) expect(versionsByTask(bus.seen).get(id)).toEqual([1, 2, 3, 4])

        // the relay sends some rows again (as after a crash between publish and mark): the dispatcher drops them
        yield* inA(Effect.flatMap(SqlClient.SqlClient, (sql) =>
          sql`UPDATE outbox_events SET published_at = NULL WHERE aggregate_id IN ${sql.in(first.slice(0, 3))}`))
        yield* inA(Effect.flatMap(SqlClient.SqlClient, (sql) =>
          sql<{ n: number }>`SELECT count(*)::int AS n FROM outbox_events WHERE published_at IS NULL`.pipe(
            Effect.flatMap(([r]) => (r!.n === 0 ? Effect.void : Effect.fail("not yet"))),
            Effect.retry(
              Schedule.spaced(Duration.millis(100)).pipe(Schedule.upTo(scaledDuration(Duration.seconds(20))))
            )
          )))
        // a fifth version of each of those tasks: the queue keeps one task's messages in order, so once the fifth
        // has arrived, the redelivered first four before it have been dealt with
        const redelivered = first.slice(0, 3) as Array<TaskId>
        for (const id of redelivered) {
          yield* inA(commitChange(id, { status: "running", stage: "generating", progress: 50 }))
        }
        yield* until("the fifth versions", () =>
          redelivered.every((id) =>
            versionsByTask(bus.seen).get(id)?.includes(5)
          ))
        expect(bus.seen.length).toBe(32 + 3)
        for (const id of redelivered) expect(versionsByTask(bus.seen).get(id)).toEqual([1, 2, 3, 4, 5])

        // a second runner joins; the first stops: its relay singleton moves, events keep flowing
        const b = yield* startScopedRunner(url, propagation(), settings)
        yield* Scope.close(a.scope, Exit.void)
        const later = yield* Effect.provide(taskWithHistory(projectId), b.context)
        yield* until("the relay on the survivor", () =>
          versionsByTask(bus.seen).get(later)?.length === 4, Duration.seconds(60))
        expect(versionsByTask(bus.seen).get(later)).toEqual([1, 2, 3, 4])
        yield* Scope.close(b.scope, Exit.void)
      }).pipe(Effect.provide(subscriberBus()), Effect.scoped),
    180_000
  )

  it.live(
    "malformed messages from the broker are dead-lettered (or, without an event id, dropped with a log); the dispatcher carries on",
    () =>
      Effect.gen(function*() {
        const { bus, inRunner, projectId, runner } = yield* startWithSubscriber
        // another producer on the topic, not our relay
        const quiet = { info: () => {}, warn: () => {}, error: () => {} }
        const producer = yield* Effect.acquireRelease(
          Effect.promise(async () => {
            const p = new Producer({ endpoints: endpoints!, namespace: "", topics: [topic], logger: quiet })
            await p.startup()
            return p
          }),
          (p) => Effect.promise(() => p.shutdown().catch(() => undefined))
        )
        const send = (group: string, body: string, eventId?: string) =>
          Effect.promise(() =>
            producer.send({
              topic,
              body: Buffer.from(body),
              keys: [group],
              messageGroup: group,
              ...(eventId === undefined ? {} : { properties: new Map([["eventId", eventId]]) })
            })
          )
        const [notJson, wrongShape] = [uuid(), uuid()]
        yield* send(uuid(), "{}") // no event id: dropped with an error log
        yield* send(uuid(), "{not json", notJson)
        yield* send(uuid(), JSON.stringify({ aggregate_id: "x", project_id: projectId }), wrongShape)

        const after = yield* inRunner(taskWithHistory(projectId))
        yield* until("the task after them", () => versionsByTask(bus.seen).get(after)?.length === 4)
        expect(versionsByTask(bus.seen).get(after)).toEqual([1, 2, 3, 4])
        const letters = yield* inRunner(listDeadLetters).pipe(
          Effect.filterOrFail((ls) => ls.length >= 2, () => "not yet"),
          Effect.retry(Schedule.spaced(Duration.millis(100)).pipe(Schedule.upTo(scaledDuration(Duration.seconds(20)))))
        )
        expect(letters.map((l) => [l.event_id, l.error.startsWith("unreadable: ")]).sort()).toEqual(
          [[notJson, true], [wrongShape, true]].sort()
        )
        expect(bus.seen.every((e) => e.payload.task_id === after)).toBe(true)
        yield* Scope.close(runner.scope, Exit.void)
      }).pipe(Effect.provide(subscriberBus()), Effect.scoped),
    180_000
  )

  it.live(
    "RocketMQ stopped for 30 s: events committed meanwhile wait in the outbox and all arrive after it starts",
    () =>
      Effect.gen(function*() {
        const { bus, inRunner, projectId, runner } = yield* startWithSubscriber
        const before = yield* inRunner(taskWithHistory(projectId))
        yield* until("before the outage", () => versionsByTask(bus.seen).get(before)?.length === 4)

        rocketmq("down")
        const stoppedAt = Date.now()
        try {
          const during = yield* Effect.forEach(Array.from({ length: 5 }), () => inRunner(taskWithHistory(projectId)), {
            concurrency: 5
          })
          const waiting = yield* inRunner(
            Effect.flatMap(SqlClient.SqlClient, (sql) =>
              sql<{ n: number }>`SELECT count(*)::int AS n FROM outbox_events WHERE published_at IS NULL`)
          )
          expect(waiting[0]!.n).toBe(20)
          yield* Effect.sleep(Duration.millis(Math.max(0, 30_000 - (Date.now() - stoppedAt))))
          rocketmq("up")
          yield* until(
            "after the outage",
            () =>
              during.every((id) => versionsByTask(bus.seen).get(id)?.length === 4),
            Duration.seconds(120)
          )
          for (const id of during) expect(versionsByTask(bus.seen).get(id)).toEqual([1, 2, 3, 4])
        } finally {
          // `status` exits non-zero when stopped: read its answer, never throw from here
          const status = spawnSync("scripts/rocketmq.sh", ["status"], { encoding: "utf8" })
          if (status.status !== 0 || status.stdout.includes("stopped")) rocketmq("up")
        }
        yield* Scope.close(runner.scope, Exit.void)
      }).pipe(Effect.provide(subscriberBus()), Effect.scoped),
    300_000
  )

  it.live(
    "Redis cut off and back: the subscriber is told of the gap and, re-reading by cursor, misses nothing",
    () =>
      Effect.gen(function*() {
        const { bus, inRunner, projectId, runner } = yield* startWithSubscriber
        const first = yield* inRunner(taskWithHistory(projectId))
        yield* until("before the cut", () => versionsByTask(bus.seen).get(first)?.length === 4)
        const lastCursor = bus.seen.at(-1)!.cursor

        redisProxy!.pause()
        const refusedBefore = redisProxy!.refused()
        const during = yield* inRunner(taskWithHistory(projectId))
        // cut off until the bus has tried to reconnect (and been refused) at least once
        yield* until("a refused reconnect", () => redisProxy!.refused() > refusedBefore, Duration.seconds(30))
        redisProxy!.resume()
        yield* until("a gap notice", () => bus.gaps() > 0)

        // what a gateway does on a gap: read the stream from its last cursor in PostgreSQL
        const [epoch, seq] = lastCursor.split("-").map(Number)
        const replayed = yield* inRunner(Effect.flatMap(SqlClient.SqlClient, (sql) =>
          sql<{ task_id: string; task_version: number }>`
          SELECT task_id, task_version FROM task_events
          WHERE project_id = ${projectId} AND stream_epoch = ${epoch!} AND cursor_seq > ${seq!} ORDER BY cursor_seq`))
        const after = yield* inRunner(taskWithHistory(projectId))
        yield* until("live again", () =>
          versionsByTask(bus.seen).get(after)?.length === 4, Duration.seconds(60))
        const got = new Set([
          ...bus.seen.map((e) => `${e.payload.task_id}:${e.payload.task_version}`),
          ...replayed.map((r) => `${r.task_id}:${r.task_version}`)
        ])
        for (const v of [1, 2, 3, 4]) expect(got.has(`${during}:${v}`)).toBe(true)
        yield* Scope.close(runner.scope, Exit.void)
      }).pipe(Effect.provide(subscriberBus()), Effect.scoped),
    180_000
  )
})
