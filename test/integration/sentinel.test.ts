import { describe, expect, it, layer } from "@effect/vitest"
import { ConfigProvider, Context, Duration, Effect, Fiber, Layer, Logger, LogLevel, Metric } from "effect"
import * as Bus from "../../src/bus/NotificationBus.js"
import { TokenSigner } from "../../src/http/Auth.js"
import { redisMasterSwitches } from "../../src/observability/metrics.js"
import { layerPropagationWith } from "../../src/propagation/Propagation.js"
import { layerMemory as queueMemory } from "../../src/queue/MemoryQueue.js"
import { ProviderQuota } from "../../src/quota/ProviderQuota.js"
import * as Redis from "../../src/redis/Redis.js"
import { admin, runOps, until as untilAnswer } from "../support/admin.js"
import { collect, eventually } from "../support/busCases.js"
import { layerTestDatabase, noDatabase } from "../support/database.js"
import { scaled, scaledDuration } from "../support/env.js"
import { until } from "../support/propagation.js"
import { freePort, layerTestRunner, quietLogs, withSettings } from "../support/runner.js"
import {
  hasSentinel,
  layerSentinels,
  MASTER_NAME,
  Sentinels,
  type SentinelSet,
  startSentinelSet
} from "../support/sentinel.js"
import { layerRunnerHttp } from "../support/simulator.js"
import { openSse, payloads, seqOf } from "../support/sse.js"
import {
  bearer,
  commitChange,
  headOf,
  projectWithTasks,
  storedEvents,
  streamSettings,
  tokenFor
} from "../support/streams.js"

/**
 * Redis behind Sentinel (issue #15 part 3), on a master, a replica and three Sentinels of the test's own (never the
 * machine's Redis): the replica is promoted (SENTINEL FAILOVER, then a killed master) while quotas are taken and
 * events flow to a browser stream. Quotas keep granting (the local buckets) and are shared again on the new master;
 * the bus resubscribes on it; the stream has no gap.
 */
const uniquePrefix = () => `test:${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}:`

const switches = (connection: string) =>
  Effect.map(Metric.value(Metric.tagged(redisMasterSwitches, "connection", connection)), (s) => s.count)

describe.skipIf(!hasSentinel)("Redis Sentinel: quotas", () => {
  it.scopedLive(
    "quotas keep granting through a failover and a killed master, and are shared again on the new master",
    () =>
      Effect.gen(function*() {
        const set = yield* startSentinelSet
        const prefix = uniquePrefix()
        const quota = yield* Layer.build(
          ProviderQuota.Default.pipe(
            Layer.provide(Redis.layerSentinel(set.sentinels, MASTER_NAME, prefix)),
            Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["QUOTA_TENANT_QPS", "20"]])))),
            Layer.provide(Logger.minimumLogLevel(LogLevel.Warning))
          )
        ).pipe(Effect.map((ctx) => Context.get(ctx, ProviderQuota)))
        const keyOf = (tenant: string) => `${prefix}quota:tenant:${tenant}:sim`
        const exists = (port: number, tenant: string) =>
          Effect.scoped(Effect.flatMap(set.connect(port), (c) => Effect.promise(() => c.exists(keyOf(tenant)))))

        // shared: a grant is a key on the master the Sentinels name
        const first = yield* set.master
        yield* quota.acquire({ provider: "sim", tenantId: "before" })
        expect(yield* exists(first, "before")).toBe(1)

        // a caller that keeps taking tokens all along: every grant's time, and the longest any one acquire took
        const grants: Array<number> = []
        let longest = 0
        const steady = yield* Effect.gen(function*() {
          const asked = Date.now()
          yield* quota.acquire({ provider: "sim", tenantId: "steady" })
          longest = Math.max(longest, Date.now() - asked)
          grants.push(Date.now())
        }).pipe(Effect.forever, Effect.fork)

        /** After a switch: grants go on, and a tenant seen for the first time gets its key on the new master. */
        const sharedAgainOn = (master: number, label: string) =>
          Effect.gen(function*() {
            const done = Date.now()
            yield* until(`${label}: grants go on after the switch`, () => grants.filter((t) => t > done).length >= 10)
            // each try is a grant for a tenant never seen before: local while the client is still switching, then
            // shared, which leaves its bucket on the new master
            let n = 0
            const found = yield* Effect.gen(function*() {
              const tenant = `${label}-${n++}`
              yield* quota.acquire({ provider: "sim", tenantId: tenant })
              return yield* exists(master, tenant)
            }).pipe(
              Effect.repeat({ until: (e) => e === 1 }),
              Effect.timeoutFail({
                duration: Duration.millis(scaled(30_000)),
                onTimeout: () => `${label}: no grant reached the new master's buckets`
              })
            )
            expect(found).toBe(1)
          })

        const before = yield* switches("main")
        const promoted = yield* set.failover
        expect(promoted.to).not.toBe(first)
        yield* sharedAgainOn(promoted.to, "after-failover")
        expect(yield* switches("main")).toBeGreaterThan(before)

        // the master dies outright: the Sentinels promote the other server (the first master, a replica since)
        const killed = yield* set.killMaster
        expect(killed.to).toBe(first)
        yield* sharedAgainOn(killed.to, "after-kill")
        expect(yield* switches("main")).toBeGreaterThan(before + 1)

        yield* Fiber.interrupt(steady)
        // never stalled: while Redis switched, callers were served by the local buckets (a dead connection fails at
        // once; a silent one after QUOTA_REDIS_TIMEOUT, 1 s)
        expect(longest).toBeLessThan(scaled(10_000))
      }),
    scaled(180_000)
  )
})

const port = await Effect.runPromise(freePort)
const eventsUrl = (projectId: string) => `http://127.0.0.1:${port}/v1/projects/${projectId}/events`

/** The runner's settings: the stream tests' and the Sentinels (what GET /admin/redis reports). */
const sentinelSettings = (set: SentinelSet) => ({
  ...streamSettings,
  REDIS_URL: "", // over the test run's own (it is one or the other)
  REDIS_SENTINELS: set.sentinels.map((s) => `${s.host}:${s.port}`).join(","),
  REDIS_MASTER_NAME: MASTER_NAME
})

/** A runner with its HTTP gateway, propagation on the in-process queue and the Redis bus behind the Sentinels. */
const layerSentinelRunner = Layer.unwrapEffect(Effect.map(Sentinels, (set) => {
  const bus = Bus.layerRedis.pipe(Layer.provide(Redis.layerSentinel(set.sentinels, MASTER_NAME, uniquePrefix())))
  return layerRunnerHttp(port).pipe(
    Layer.provideMerge(layerTestRunner(layerTestDatabase(16), { propagation: layerPropagationWith(queueMemory, bus) })),
    Layer.provide(quietLogs),
    Layer.provide(withSettings(sentinelSettings(set)))
  )
})).pipe(Layer.provideMerge(layerSentinels))

describe.skipIf(!hasSentinel || noDatabase)("Redis Sentinel: the notification bus and a browser stream", () => {
  layer(layerSentinelRunner, { timeout: scaled(120_000), excludeTestServices: true })((it) => {
    it.effect(
      "a failover under a stream: no event lost, and the bus resubscribes on the new master",
      () =>
        Effect.gen(function*() {
          const set = yield* Sentinels
          const bus = yield* Bus.NotificationBus
          const { projectId, tasks } = yield* projectWithTasks(2)
          const start = yield* headOf(projectId)
          const client = yield* openSse(eventsUrl(projectId), bearer(yield* tokenFor()))
          yield* commitChange(tasks[0]!, { status: "running", stage: "generating", progress: 1 })
          yield* until("the first live event", () => payloads(client).length === 1)
          const channel = `*project:${projectId}`
          const channelsOn = (master: number) =>
            Effect.scoped(Effect.flatMap(
              set.connect(master),
              (c) => Effect.promise(() => c.pubsub("CHANNELS", channel) as Promise<Array<string>>)
            ))
          expect(yield* channelsOn(yield* set.master)).toHaveLength(1)
          // a subscriber of the bus itself, from before the switch
          const probe = yield* collect(yield* bus.subscribe("probe"))
          yield* bus.publish("probe", "before the switch")
          yield* eventually(() => expect(probe).toEqual(["before the switch"]))

          // a writer commits all along, before, during and after the switch, paced by the stream rather than a clock:
          // at most AHEAD of its events are not on the stream yet (while the bus is down they are, a few at a time, by
          // the gateway's tail of PostgreSQL). Once the Sentinels name the new master it makes AFTER more and stops.
          const AHEAD = 10
          const AFTER = 20
          let committed = 0
          let remaining = Number.POSITIVE_INFINITY
          const onStream = () => payloads(client).length - 1 // the first live event was committed before the writer
          const writer = yield* Effect.gen(function*() {
            for (; remaining > 0; remaining--) {
              yield* client.waitFor("the writer's events on the stream", () => committed - onStream() < AHEAD)
              yield* commitChange(tasks[committed % 2]!, {
                status: "running",
                stage: "generating",
                progress: committed % 101 // the column's CHECK: 0 to 100 (a commit past it fails, and the writer dies)
              })
              committed++
            }
          }).pipe(Effect.fork)
          const { to } = yield* set.failover
          remaining = AFTER
          // the writer's own failure ends the test at once, with its cause
          yield* Fiber.join(writer).pipe(
            Effect.timeoutFail({
              duration: scaledDuration("30 seconds"),
              onTimeout: () => `commits after the switch: ${committed} committed, ${onStream()} on the stream`
            })
          )

          // the stream: every stored event, in order, none twice
          const stored = yield* storedEvents(projectId, start.seq)
          yield* until("every stored event on the stream", () => payloads(client).length >= stored.length)
          const got = payloads(client)
          expect(got.map((e) => seqOf(e.id))).toEqual(stored.map((r) => Number(r.cursor_seq)))
          expect(got.map((e) => `${e.task_id}@${e.task_version}`)).toEqual(
            stored.map((r) => `${r.task_id}@${Number(r.task_version)}`)
          )

          // the bus: the gateway's feed is subscribed on the new master, and what is published now reaches the
          // subscriber from before the switch live, after a Gap (it may have missed messages meanwhile)
          yield* untilAnswer("the feed's channel subscribed on the new master", channelsOn(to), (c) => c.length === 1)
          // each connection follows the switch in its own time, the publisher's too (seen 550 ms after the
          // subscriber's), and a publish meanwhile fails at once (BusUnavailable: no offline queue, by design)
          const newMaster = `127.0.0.1:${to}`
          yield* untilAnswer(
            "every Redis connection of the runner ready on the new master",
            Effect.sync(() => Redis.connectionStates().map((c) => `${c.connection}: ${c.status} on ${c.master}`)),
            (states) => states.every((s) => s.endsWith(`: ready on ${newMaster}`))
          )
          yield* bus.publish("probe", "after the switch")
          yield* eventually(
            () => expect(probe).toEqual(["before the switch", "<gap>", "after the switch"]),
            "10 seconds"
          )
          client.close()

          // what an operator sees: the runner's connections on the master the Sentinels name, each switch counted
          const token = yield* Effect.flatMap(TokenSigner, (s) => s.signOperator("sentinel-test"))
          const { body, status } = yield* admin(port, token, "/admin/redis")
          expect({ status, body }).toMatchObject({ status: 200 })
          expect(body).toMatchObject({ mode: "sentinel", sentinel_master: newMaster })
          const connections =
            (body as { connections: Array<{ connection: string; master: string; master_switches: number }> })
              .connections
          expect(connections.find((c) => c.connection === "bus-subscriber")).toMatchObject({
            master: newMaster,
            master_switches: 1
          })
          expect(connections.find((c) => c.connection === "main")).toMatchObject({
            master: newMaster,
            master_switches: 1
          })
          const ops = yield* runOps(["redis", "status"], { OPS_URL: `http://127.0.0.1:${port}`, OPS_TOKEN: token })
          expect(ops.stderr).toBe("")
          expect(ops.stdout).toContain(`the Sentinels name ${newMaster}`)
          expect(ops.stdout).toMatch(new RegExp(`bus-subscriber\\s+ready\\s+${newMaster}\\s+\\d+\\s+1`))
        }).pipe(Effect.scoped),
      scaled(180_000)
    )
  })
})
