import { Effect } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import type pg from "pg"
import { buildDist, RUNNER_PROGRAM } from "../scripts/build.mjs"
import { TokenSigner } from "../src/http/Auth.js"
import type { TenantId, UserId } from "../src/schema/ids.js"
import { allocatePort } from "../test/support/ports.js"

/** What the benchmark programs share: ports, a runner process, percentiles. */

/**
 * A free port below the ephemeral range (test/support/ports.ts): a port the kernel hands out for port 0 can be taken
 * meanwhile as the local port of any outgoing connection (measured: a runner's HTTP port, between the bench's choice
 * and the runner's listen, EADDRINUSE).
 */
export const freePort = allocatePort

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/** The p-th percentile (0–100) of the samples; NaN when there are none. */
export const percentile = (xs: ReadonlyArray<number>, p: number) => {
  const sorted = [...xs].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN
}

/** The median of the samples (the figure benches report of repeated rounds); NaN when there are none. */
export const median = (xs: ReadonlyArray<number>) => percentile(xs, 50)

/** This process's CPU (user + system, all threads, ms) since `before` (a `process.cpuUsage()`). */
export const ownCpuMsSince = (before: NodeJS.CpuUsage) => {
  const used = process.cpuUsage(before)
  return (used.user + used.system) / 1000
}

/**
 * JSON request headers with a bearer token of a new tenant and user for every project, signed with `secret` (which
 * becomes this process's AUTH_SECRET): the runners the bench starts must have the same.
 */
export const bearerHeaders = async (secret: string) => {
  process.env.AUTH_SECRET = secret
  const token = await Effect.runPromise(
    Effect.flatMap(
      TokenSigner,
      (s) => s.sign({ tenant_id: crypto.randomUUID() as TenantId, sub: crypto.randomUUID() as UserId, projects: "*" })
    ).pipe(Effect.provide(TokenSigner.Default))
  )
  return { authorization: `Bearer ${token}`, "content-type": "application/json" }
}

/**
 * A fresh database `<prefix>_<time>` beside the one `admin` is connected to (at `adminUrl`): its URL, and its drop
 * (forced: runners still connected are cut off).
 */
export const freshDatabase = async (admin: pg.Client, adminUrl: string, prefix: string) => {
  const name = `${prefix}_${Date.now().toString(36)}`
  await admin.query(`CREATE DATABASE ${name}`)
  const url = new URL(adminUrl)
  url.pathname = `/${name}`
  return { url: url.toString(), drop: () => admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`) }
}

/** A process's CPU time so far (user + system, seconds), from /proc. */
export const cpuSeconds = (pid: number) => {
  const fields = fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ")
  return (Number(fields[11]) + Number(fields[12])) / 100 // clock ticks, 100 a second
}

/** The library's line when a runner cannot renew its shard locks: it then gives up its shards (a self-inflicted failover). */
export const SHARD_LOCK_LOSS = "Shard lock storage is unhealthy"

/** A metric summed over its series in one scrape of GET /metrics (`text`). */
export const metricIn = (text: string, name: string) =>
  text.split("\n").filter((l) => l.startsWith(`${name} `) || l.startsWith(`${name}{`))
    .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(" ") + 1)), 0)

/** A metric summed over its series and over the runners on `httpPorts` (their GET /metrics). */
export const gauge = async (httpPorts: ReadonlyArray<number>, name: string) => {
  let total = 0
  for (const httpPort of httpPorts) {
    total += metricIn(await (await fetch(`http://127.0.0.1:${httpPort}/metrics`)).text(), name)
  }
  return total
}

/**
 * What every bench reports beside its own figures, per runner process: the event-loop lag p99 of each window the
 * runner closed (its `event_loop_lag_seconds{stat="p99"}`, EVENT_LOOP_LAG_WINDOW set to 1 s by startRunnerProcess),
 * scraped from GET /metrics once a second, and how often the runner logged SHARD_LOCK_LOSS.
 */
export interface RunnerHealth {
  readonly lagP99Ms: Array<number>
  shardLockLosses: number
  /** Stops scraping; returns the summary line's figures. */
  readonly stop: () => { readonly lagP99Ms: number; readonly lagMaxWindowMs: number; readonly shardLockLosses: number }
}

const scrapeLagP99 = async (httpPort: number): Promise<number | undefined> => {
  try {
    const text = await (await fetch(`http://127.0.0.1:${httpPort}/metrics`, { signal: AbortSignal.timeout(2_000) }))
      .text()
    const line = text.split("\n").find((l) => l.startsWith("event_loop_lag_seconds{") && l.includes(`stat="p99"`))
    return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(" ") + 1)) * 1000
  } catch {
    return undefined // stopping, or too busy to answer within 2 s (which the next scrape's window shows)
  }
}

const watchHealth = (child: ChildProcess, httpPort: number, output: "inherit" | "ignore"): RunnerHealth => {
  const health: RunnerHealth = {
    lagP99Ms: [],
    shardLockLosses: 0,
    stop: () => {
      clearInterval(timer)
      return {
        lagP99Ms: percentile(health.lagP99Ms, 50),
        lagMaxWindowMs: health.lagP99Ms.length === 0 ? NaN : Math.max(...health.lagP99Ms),
        shardLockLosses: health.shardLockLosses
      }
    }
  }
  for (const [from, to] of [[child.stdout, process.stdout], [child.stderr, process.stderr]] as const) {
    let tail = ""
    from?.on("data", (chunk: Buffer) => {
      // each line marked with the runner's HTTP port: two runners' output interleaves
      if (output === "inherit") to.write(chunk.toString().replace(/^(?=.)/gm, `[${httpPort}] `))
      const text = tail + chunk.toString()
      // the tail kept is one character shorter than the line: a line cut between two chunks is counted once
      health.shardLockLosses += text.split(SHARD_LOCK_LOSS).length - 1
      tail = text.slice(-(SHARD_LOCK_LOSS.length - 1))
    })
  }
  let last = 0
  const timer = setInterval(() => {
    void scrapeLagP99(httpPort).then((ms) => {
      // one figure per closed window (the gauge keeps the last window's value between closes)
      const now = Date.now()
      if (ms !== undefined && now - last >= 900) {
        last = now
        health.lagP99Ms.push(ms)
      }
    })
  }, 1_000)
  timer.unref()
  return health
}

/** "lag p99 12 ms (worst 1 s window 40 ms), shard-lock losses 0" for several runners' summaries. */
export const healthLine = (summaries: ReadonlyArray<ReturnType<RunnerHealth["stop"]>>) =>
  summaries.map((h, i) =>
    `${summaries.length > 1 ? `runner ${i + 1}: ` : ""}event-loop lag p99 ${h.lagP99Ms.toFixed(0)} ms (median of 1 s ` +
    `windows; worst window ${h.lagMaxWindowMs.toFixed(0)} ms), "${SHARD_LOCK_LOSS}" ${h.shardLockLosses}×` +
    (h.shardLockLosses > 0 ? "  <-- FAILOVER" : "")
  ).join("\n")

/**
 * `npm start`'s program runs as in production: built (scripts/build.mjs), once per bench or drill. BENCH_RUNNER=tsx
 * runs it from source under tsx instead, as every bench did before stop 24 (for an A/B).
 */
let built: Promise<unknown> | undefined

/**
 * `npm start`'s program as a child process on free ports with the given environment (and node flags); resolves
 * once its HTTP API answers, with a RunnerHealth watching it (stop it before the summary).
 */
export const startRunnerProcess = async (
  env: Record<string, string>,
  options: {
    readonly nodeArgs?: ReadonlyArray<string>
    readonly output?: "inherit" | "ignore"
    /** Fixed ports (a restarted runner keeps its address); free ones otherwise. */
    readonly ports?: { readonly http: number; readonly runner: number }
    /** What answers 200 once it has started (default /openapi.json: the api role; /readyz for a process without it). */
    readonly readyPath?: string
  } = {}
) => {
  const [httpPort, runnerPort] = options.ports === undefined
    ? [await freePort(), await freePort()]
    : [options.ports.http, options.ports.runner]
  const output = options.output ?? "inherit"
  const program = process.env.BENCH_RUNNER === "tsx"
    ? ["--import", "tsx", "src/runners/main.ts"]
    : (await (built ??= buildDist()), [RUNNER_PROGRAM])
  const child = spawn(process.execPath, [...(options.nodeArgs ?? []), ...program], {
    env: {
      ...process.env,
      HTTP_PORT: String(httpPort),
      RUNNER_PORT: String(runnerPort),
      LOG_LEVEL: "ERROR",
      EMBEDDED_SIMULATOR: "false",
      EVENT_LOOP_LAG_WINDOW: "1 second",
      ...env
    },
    stdio: ["ignore", "pipe", "pipe"]
  })
  const health = watchHealth(child, httpPort, output)
  // a loaded machine (a soak's own broker starting beside it) has taken two minutes to start a runner
  const deadline = Date.now() + 240_000
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`runner exited while starting (${child.exitCode ?? child.signalCode})`)
    }
    try {
      // bounded: a runner answers 503 Starting before its API is attached, but a lost answer must not hang the bench
      const answer = await fetch(`http://127.0.0.1:${httpPort}${options.readyPath ?? "/openapi.json"}`, {
        signal: AbortSignal.timeout(2_000)
      })
      if (answer.ok) return { child, httpPort, health }
    } catch {
      // starting
    }
    await sleep(250)
  }
  health.stop()
  await stopProcess(child, "SIGKILL")
  throw new Error("runner did not start")
}

/** Stops a child with `signal` (KILL after 15 s) and waits for it to exit. */
export const stopProcess = (child: ChildProcess, signal: NodeJS.Signals) =>
  new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve()
    child.on("exit", () => resolve())
    child.kill(signal)
    setTimeout(() => child.kill("SIGKILL"), 15_000).unref()
  })
