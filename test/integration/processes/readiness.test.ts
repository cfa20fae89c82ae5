import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Scope } from "effect"
import { execFileSync } from "node:child_process"
import { freePort } from "../../../src/testing/TestRunner.js"
import { databaseUrl, makeTestDatabaseUrl, noDatabase } from "../../support/database.js"
import { scaled, services } from "../../support/env.js"
import { waitForReady } from "../../support/npmStart.js"
import { spawnRunner } from "../../support/processes.js"
import { startTcpProxy } from "../../support/tcpProxy.js"

const AUTH_SECRET = "readiness-test-secret-0123456789abcdef"
/** READINESS_CHECK_TIMEOUT of the runner under test. */
const CHECK_TIMEOUT_MS = 1_000
/** What an answer may take on top of the check timeout: the HTTP round trip on a loaded machine. */
const MARGIN_MS = 2_000

interface Check {
  readonly name: string
  readonly ok: boolean
  readonly latency_ms: number
  readonly error?: string
}
interface Answer {
  readonly status: number
  readonly ms: number
  readonly body: { readonly status: string; readonly state: string; readonly checks: ReadonlyArray<Check> }
}

const get = async (port: number, path: string, init: RequestInit = {}) => {
  const started = performance.now()
  const res = await fetch(`http://127.0.0.1:${port}${path}`, { ...init, signal: AbortSignal.timeout(scaled(20_000)) })
  const text = await res.text()
  return { status: res.status, ms: performance.now() - started, text }
}

const readyz = async (port: number): Promise<Answer> => {
  const { ms, status, text } = await get(port, "/readyz")
  return { status, ms, body: JSON.parse(text) }
}

/** Polls /readyz until `until` holds for an answer; every answer on the way must come within the bound. */
const readyzUntil = async (port: number, until: (a: Answer) => boolean, within = 60_000) => {
  const deadline = Date.now() + scaled(within)
  const slow: Array<number> = []
  while (Date.now() < deadline) {
    const a = await readyz(port)
    if (a.ms > scaled(CHECK_TIMEOUT_MS + MARGIN_MS)) slow.push(Math.round(a.ms))
    if (until(a)) return { answer: a, slow }
    await new Promise((r) => setTimeout(r, 200))
  }
  throw new Error(`/readyz never answered as expected within ${scaled(within)} ms`)
}

const checkOf = (a: Answer, name: string) => a.body.checks.find((c) => c.name === name)

/** A topic and consumer group of this run's own, so the runner's dispatcher takes no other file's messages. */
const rocketmq = (...args: Array<string>) =>
  execFileSync("scripts/rocketmq.sh", args, { stdio: "pipe", timeout: scaled(300_000) })
const suffix = crypto.randomUUID().slice(0, 8)
const TOPIC = `test-readiness-${suffix}`
const GROUP = `test-readiness-dispatcher-${suffix}`

/**
 * A runner on PostgreSQL, Redis and RocketMQ, each reached through a TCP proxy of the test's own, so one can go
 * silent or away without touching the services other files share. /readyz names every dependency, fails the one
 * that is gone within READINESS_CHECK_TIMEOUT (never a hung probe), and comes back when it does.
 */
describe.skipIf(noDatabase || services.redisUrl === undefined || services.rocketmqEndpoints === undefined)(
  "/healthz, /livez and /readyz of a runner on PostgreSQL, Redis and RocketMQ",
  () => {
    it("answer without auth; a silent or lost dependency is a failed check within the timeout", async () => {
      const scope = Effect.runSync(Scope.make())
      const run = <A, E>(effect: Effect.Effect<A, E, Scope.Scope>) => Effect.runPromise(Scope.extend(effect, scope))
      try {
        const { url } = await run(makeTestDatabaseUrl)
        await run(Effect.acquireRelease(
          Effect.sync(() => rocketmq("topic", TOPIC, GROUP)),
          () => Effect.sync(() => rocketmq("drop", TOPIC, GROUP))
        ))
        const db = await startTcpProxy(Number(new URL(databaseUrl!).port || 5432))
        const redisTarget = new URL(services.redisUrl!)
        const redis = await startTcpProxy(Number(redisTarget.port || 6379), redisTarget.hostname)
        const [mqHost, mqPort] = services.rocketmqEndpoints!.split(":")
        const mq = await startTcpProxy(Number(mqPort), mqHost)
        await run(Effect.addFinalizer(() => Effect.promise(() => Promise.all([db.close(), redis.close(), mq.close()]))))
        const proxied = new URL(url)
        proxied.hostname = "127.0.0.1"
        proxied.port = String(db.port)
        redisTarget.hostname = "127.0.0.1"
        redisTarget.port = String(redis.port)
        const [httpPort, runnerPort] = await Effect.runPromise(Effect.all([freePort, freePort]))
        const runner = spawnRunner({
          DATABASE_URL: proxied.toString(),
          REDIS_URL: redisTarget.toString(),
          REDIS_KEY_PREFIX: `readiness-${runnerPort}:`,
          ROCKETMQ_ENDPOINTS: `127.0.0.1:${mq.port}`,
          ROCKETMQ_TOPIC: TOPIC,
          DISPATCHER_GROUP: GROUP,
          AUTH_SECRET,
          READINESS_CHECK_TIMEOUT: `${CHECK_TIMEOUT_MS} millis`,
          DB_CONNECT_TIMEOUT: "2 seconds",
          DB_STATEMENT_TIMEOUT: "1 second",
          HTTP_PORT: String(httpPort),
          RUNNER_PORT: String(runnerPort)
        })
        await run(Effect.addFinalizer(() => Effect.sync(() => runner.child.kill("SIGKILL"))))
        await waitForReady(httpPort, runner)

        // every dependency named and passing, no token needed
        const ready = await readyz(httpPort)
        expect(ready.status).toBe(200)
        expect(ready.body.status).toBe("ready")
        expect(ready.body.state).toBe("serving")
        expect(ready.body.checks.map((c) => [c.name, c.ok])).toEqual([
          ["database", true],
          ["migrations", true],
          ["shard_locks", true],
          ["redis", true],
          ["rocketmq", true]
        ])
        for (const c of ready.body.checks) expect(c.latency_ms).toBeGreaterThanOrEqual(0)
        for (const path of ["/healthz", "/livez"]) {
          const live = await get(httpPort, path)
          expect(live.status).toBe(200)
          expect(JSON.parse(live.text)).toMatchObject({
            status: "alive",
            event_loop_lag_ms: { p50: expect.any(Number), p99: expect.any(Number), max: expect.any(Number) }
          })
        }
        expect((await get(httpPort, "/readyz", { method: "POST" })).status).toBe(405)
        // the API itself does need the token
        expect((await get(httpPort, "/v1/projects")).status).toBe(401)

        // RocketMQ's proxy goes away, then comes back
        mq.pause()
        const mqDown = await readyzUntil(httpPort, (a) => checkOf(a, "rocketmq")?.ok === false)
        expect(mqDown.slow).toEqual([])
        expect(mqDown.answer.status).toBe(503)
        expect(checkOf(mqDown.answer, "database")?.ok).toBe(true)
        mq.resume()
        const mqBack = await readyzUntil(httpPort, (a) => a.status === 200)
        expect(mqBack.slow).toEqual([])

        // Redis goes silent: connections stay open, nothing comes back
        redis.blackhole()
        const redisSilent = await readyzUntil(httpPort, (a) => checkOf(a, "redis")?.ok === false)
        expect(redisSilent.slow).toEqual([])
        expect(redisSilent.answer.status).toBe(503)
        expect(checkOf(redisSilent.answer, "redis")?.error).toMatch(/no answer within|Connection|closed|writable/i)

        // and PostgreSQL too: the database check fails in time, and the cluster's own lock refreshes fail after it
        db.blackhole()
        const dbSilent = await readyzUntil(
          httpPort,
          (a) => checkOf(a, "database")?.ok === false && checkOf(a, "shard_locks")?.ok === false
        )
        expect(dbSilent.slow).toEqual([])
        expect(dbSilent.answer.status).toBe(503)
        expect(checkOf(dbSilent.answer, "migrations")?.ok).toBe(false)
        // said once when each check started failing, not on every probe
        const failing = runner.output().split("\n").filter((l) => l.includes("readiness: redis failing"))
        expect(failing).toHaveLength(1)
      } finally {
        await Effect.runPromise(Scope.close(scope, Exit.void))
      }
    }, scaled(300_000))
  }
)
