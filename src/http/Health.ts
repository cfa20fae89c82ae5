/**
 * Where Effect stops: the probes answer on the Node server's raw routes (RawRoutes.ts), before the platform's app, so
 * they go through no auth, no request logger (a load balancer polling every second would log a line a second) and
 * no body parsing. Effect runs the checks themselves.
 *
 * - `GET /healthz` and `GET /livez` (the same answer: platforms default to one or the other): the process and its
 *   event loop are alive, with the loop's lag. Always 200 when it answers. Liveness checks nothing outside the
 *   process: a database outage must not get every runner restarted.
 * - `GET /readyz`: whether this runner should get traffic. 200 only while it is serving (not draining, not stopping)
 *   and every check passed within READINESS_CHECK_TIMEOUT: the database and its migrations, the cluster's shard-lock
 *   storage (its own last refresh, ShardLockWatch.ts), Redis and RocketMQ when configured. 503 otherwise, with the
 *   same JSON body listing each check.
 *
 * A check runs when the process has what it checks: the shard-lock watch, Redis, the event queue. The runner provides
 * them as its roles use them (src/runners/Runner.ts): a cluster client holds no shard lock, an API process does not
 * wait on RocketMQ.
 */
import { Sharding } from "@effect/cluster"
import { SqlClient } from "@effect/sql"
import { Duration, Effect, Either, FiberSet, Layer, Metric, Option } from "effect"
import type { IncomingMessage, ServerResponse } from "node:http"
import * as S from "../config/Settings.js"
import { latestMigration, MIGRATIONS_TABLE } from "../persistence/Database.js"
import { EventQueue } from "../queue/EventQueue.js"
import { QueueSettings } from "../queue/RocketMQQueue.js"
import { Redis } from "../redis/Redis.js"
import { EventLoopLag, layerEventLoopLag } from "./EventLoopLag.js"
import { RawRoutes } from "./RawRoutes.js"
import { RunnerState } from "./RunnerState.js"
import { ShardLockWatch } from "./ShardLockWatch.js"

export const HealthSettings = S.area("Health", "the probes /healthz, /livez and /readyz, and shutdown order", {
  checkTimeout: S.duration(
    "READINESS_CHECK_TIMEOUT",
    "longest wait for one /readyz check (database, Redis, RocketMQ): a silent dependency is a failed check, never a " +
      "hung probe; keep the probe's own timeout above it",
    "1 second"
  ),
  grace: S.duration(
    "READINESS_GRACE",
    "on SIGTERM/SIGINT, how long /readyz answers 503 before the listener closes and the shards move, so a load " +
      "balancer stops sending first; set it to the balancer's check interval × its failure threshold",
    "2 seconds"
  ),
  lagWindow: S.duration(
    "EVENT_LOOP_LAG_WINDOW",
    "window of the event-loop lag figures (event_loop_lag_seconds, /healthz): p50, p99 and max of the last one",
    "5 seconds"
  )
})

export interface CheckResult {
  readonly name: string
  readonly ok: boolean
  readonly latency_ms: number
  readonly error?: string
  readonly detail?: string
}

const failures = Metric.counter("readiness_check_failures", {
  description: "readiness checks that failed or timed out, by check",
  incremental: true
})

/**
 * Concurrent probes share one round of checks, and a round's answer serves for this long: /readyz needs no auth,
 * so however often it is called, it costs the database (and Redis, RocketMQ) at most ~4 small queries a second.
 * The serving state is read fresh every time (a SIGTERM shows at once).
 */
const ROUND_TTL = Duration.millis(250)

/** A check that keeps failing and passing warns at most this often. */
const WARN_INTERVAL_MS = 60_000

const round2 = (ms: number) => Math.round(ms * 100) / 100

/** Runs `check` within `timeout`: how long it took, and its value or why it failed (one line). */
const timed = <A, E>(check: Effect.Effect<A, E>, timeout: Duration.Duration) =>
  Effect.gen(function*() {
    const started = performance.now()
    const outcome = yield* check.pipe(
      Effect.timeoutFail({ duration: timeout, onTimeout: () => `no answer within ${Duration.format(timeout)}` }),
      Effect.mapError((e: unknown) =>
        typeof e === "string" ? e : String((e as { readonly message?: unknown } | null)?.message ?? e)
      ),
      Effect.either
    )
    return { latency_ms: round2(performance.now() - started), outcome }
  })

/** A check that passes when `check` succeeds (with None) in time. */
const checked = <E>(name: string, check: Effect.Effect<Option.Option<string>, E>, timeout: Duration.Duration) =>
  Effect.map(timed(check, timeout), ({ latency_ms, outcome }): CheckResult => {
    const problem = Either.match(outcome, { onLeft: Option.some, onRight: (p) => p })
    return Option.match(problem, {
      onNone: () => ({ name, ok: true, latency_ms }),
      onSome: (error) => ({ name, ok: false, latency_ms, error })
    })
  })

const none = Option.none<string>()

/** The checks of a round, every one bounded, all side by side. */
const makeChecks = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const locks = yield* Effect.serviceOption(ShardLockWatch)
  const redis = yield* Effect.serviceOption(Redis)
  const queue = yield* Effect.serviceOption(EventQueue)
  const { checkTimeout } = yield* HealthSettings.config
  const { endpoints } = yield* QueueSettings.config

  // one query answers both: the database serves, and it has the newest migration this code knows
  const database = Effect.map(
    timed(
      sql<{ applied: number | null }>`SELECT max(migration_id) AS applied FROM ${sql(MIGRATIONS_TABLE)}`,
      checkTimeout
    ),
    ({ latency_ms, outcome }): ReadonlyArray<CheckResult> =>
      Either.match(outcome, {
        onLeft: (error) => [
          { name: "database", ok: false, latency_ms, error },
          { name: "migrations", ok: false, latency_ms, error: "database unavailable" }
        ],
        onRight: (rows) => {
          const applied = Number(rows[0]?.applied ?? 0)
          const detail = `${applied} of ${latestMigration} applied`
          return [
            { name: "database", ok: true, latency_ms },
            applied >= latestMigration
              ? { name: "migrations", ok: true, latency_ms, detail }
              : { name: "migrations", ok: false, latency_ms, error: detail }
          ]
        }
      })
  )
  const one = (check: Effect.Effect<CheckResult>) => Effect.map(check, (r): ReadonlyArray<CheckResult> => [r])
  const checks = [database]
  if (Option.isSome(locks)) checks.push(one(checked("shard_locks", locks.value.problem, checkTimeout)))
  const client = Option.flatMap(redis, (r) => r.client)
  if (Option.isSome(client)) {
    const connection = client.value
    const ping = Effect.tryPromise({
      try: () => connection.ping(),
      catch: (e) => String((e as { readonly message?: unknown } | null)?.message ?? e)
    })
    checks.push(one(checked("redis", Effect.as(ping, none), checkTimeout)))
  }
  if (Option.isSome(queue) && Option.isSome(endpoints) && endpoints.value.length > 0) {
    checks.push(one(checked("rocketmq", Effect.as(queue.value.ping, none), checkTimeout)))
  }
  return Effect.map(Effect.all(checks, { concurrency: "unbounded" }), (rs) => rs.flat())
})

export interface Readiness {
  readonly ready: boolean
  readonly state: string
  readonly checks: ReadonlyArray<CheckResult>
}

/** `/healthz`, `/livez` and `/readyz` on the raw routes, and the event-loop lag monitor behind them. */
export const HealthRoutesLive = Layer.scopedDiscard(Effect.gen(function*() {
  const routes = yield* RawRoutes
  const lag = yield* EventLoopLag
  const state = yield* RunnerState
  const sharding = yield* Sharding.Sharding
  const run = yield* FiberSet.makeRuntime<never>()
  const started = Date.now()

  // logged when a check changes outcome, not every round (a prober polls every second), and a check that flaps
  // (a database slower than the timeout now and then, on a loaded machine) warns at most once a minute
  const checks = new Map<string, { ok: boolean; warnedAt: number; warned: boolean; unsaid: number }>()
  const observe = (results: ReadonlyArray<CheckResult>) =>
    Effect.forEach(results, (r) => {
      const now = Date.now()
      const c = checks.get(r.name) ?? { ok: true, warnedAt: -Infinity, warned: false, unsaid: 0 }
      checks.set(r.name, c)
      const count = r.ok ? Effect.void : Metric.increment(Metric.tagged(failures, "check", r.name))
      if (c.ok === r.ok) return count
      c.ok = r.ok
      const annotate = Effect.annotateLogs({ check: r.name, latency_ms: r.latency_ms })
      if (r.ok) {
        if (!c.warned) return count
        c.warned = false
        return Effect.zipRight(count, Effect.logInfo(`readiness: ${r.name} ok again`).pipe(annotate))
      }
      if (now - c.warnedAt < WARN_INTERVAL_MS) {
        c.unsaid++
        return count
      }
      const unsaid = c.unsaid
      Object.assign(c, { warnedAt: now, warned: true, unsaid: 0 })
      const warn = Effect.logWarning(`readiness: ${r.name} failing: ${r.error ?? ""}`).pipe(
        annotate,
        Effect.annotateLogs(unsaid > 0 ? { failures_not_logged: unsaid } : {})
      )
      return Effect.zipRight(count, warn)
    }, { discard: true })
  const round = yield* Effect.cachedWithTTL(Effect.tap(yield* makeChecks, observe), ROUND_TTL)

  const readiness: Effect.Effect<Readiness> = Effect.gen(function*() {
    const results = yield* round
    const serving = yield* state.get
    const shutdown = yield* sharding.isShutdown
    const current = shutdown ? "stopping" : serving
    return { ready: current === "serving" && results.every((c) => c.ok), state: current, checks: results }
  })

  const send = (req: IncomingMessage, res: ServerResponse, status: number, body: unknown) => {
    const json = JSON.stringify(body)
    res.writeHead(status, {
      "content-type": "application/json",
      "cache-control": "no-store",
      "content-length": Buffer.byteLength(json)
    })
    res.end(req.method === "HEAD" ? undefined : json)
  }
  const allowed = (req: IncomingMessage, res: ServerResponse) => {
    if (req.method === "GET" || req.method === "HEAD") return true
    res.writeHead(405, { allow: "GET, HEAD", "content-type": "application/json" })
    res.end(JSON.stringify({ _tag: "MethodNotAllowed", message: "use GET" }))
    return false
  }

  const live = (req: IncomingMessage, res: ServerResponse) => {
    if (!allowed(req, res)) return
    // through the Effect runtime on purpose: an answer proves its scheduler runs too, not only Node's loop
    void run(Effect.map(lag.last, (w) =>
      send(req, res, 200, {
        status: "alive",
        uptime_seconds: Math.round((Date.now() - started) / 1000),
        event_loop_lag_ms: {
          p50: round2(w.p50Ms),
          p99: round2(w.p99Ms),
          max: round2(w.maxMs),
          window_ms: w.windowMs
        }
      })))
  }
  const ready = (req: IncomingMessage, res: ServerResponse) => {
    if (!allowed(req, res)) return
    void run(Effect.map(readiness, (r) =>
      send(req, res, r.ready ? 200 : 503, {
        status: r.ready ? "ready" : "not_ready",
        state: r.state,
        checks: r.checks
      })))
  }

  yield* routes.request((path) => path === "/healthz" || path === "/livez", live)
  yield* routes.request((path) => path === "/readyz", ready)
})).pipe(
  Layer.provide(Layer.unwrapEffect(
    Effect.map(Effect.orDie(HealthSettings.config), ({ lagWindow }) => layerEventLoopLag(lagWindow))
  ))
)
