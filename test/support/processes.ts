import { Effect } from "effect"
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import { inject } from "vitest"
import { RUNNER_PROGRAM } from "../../scripts/build.mjs"
import { makeTestDatabaseUrl } from "./database.js"
import { processEnv, scaled, TEST_PROCESS_MARK } from "./env.js"
import { allocatePort } from "./ports.js"

export interface Proc {
  readonly child: ChildProcess
  readonly output: () => string
  readonly exited: Promise<number | null>
}

export { TEST_PROCESS_MARK } from "./env.js"

/** The run's id, made by the global setup and handed to the workers (vitest's provide/inject, not the environment). */
const runId = (): string => inject("testRunId")

declare module "vitest" {
  export interface ProvidedContext {
    testRunId: string
  }
}

const children = new Set<ChildProcess>()
process.once("exit", () => {
  for (const child of children) child.kill("SIGKILL")
})

/**
 * `npm start`'s program (src/runners/main.ts, built into dist/ by the global setup) as a child process with exactly the given settings (plus PATH and
 * the like, env.ts `processEnv`): no service URL of the test run leaks into it unless the test passes it; without
 * its embedded provider simulator unless `settings` asks for it (several runners would all want its port).
 */
export const spawnRunner = (settings: Record<string, string>): Proc =>
  spawnMarked(process.execPath, [RUNNER_PROGRAM], {
    EMBEDDED_SIMULATOR: "false",
    ...processEnv(settings)
  })

/**
 * Any program a test starts (a runner, Prometheus), with the run's mark in its environment (the global teardown kills
 * whatever carries it) and its output kept.
 */
export const spawnMarked = (command: string, args: ReadonlyArray<string>, env: Record<string, string>): Proc => {
  const child = spawn(command, args, { env: { ...env, [TEST_PROCESS_MARK]: runId() }, stdio: "pipe" })
  children.add(child)
  let out = ""
  child.stdout!.on("data", (d) => (out += d))
  child.stderr!.on("data", (d) => (out += d))
  const exited = new Promise<number | null>((resolve) =>
    child.on("exit", (code) => {
      children.delete(child)
      resolve(code)
    })
  )
  return { child, output: () => out, exited }
}

/** Waits until the runner answers HTTP on `port`; each try has its own deadline (a port may accept and stay silent). */
export const waitForHttp = async (port: number, proc: Proc, within = 120_000) => {
  const timeoutMs = scaled(within)
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (proc.child.exitCode !== null) throw new Error(`runner exited early:\n${proc.output()}`)
    try {
      const res = await fetch(`http://127.0.0.1:${port}/openapi.json`, { signal: AbortSignal.timeout(2_000) })
      if (res.ok) return
    } catch {
      // not listening yet, or not answering
    }
    await new Promise((r) => setTimeout(r, 250))
  }
  throw new Error(`runner did not answer HTTP on ${port} within ${timeoutMs} ms:\n${proc.output()}`)
}

/** Fails after `ms` (scaled by TEST_TIME_FACTOR) unless `p` settled first. */
export const withTimeout = <A>(p: Promise<A>, ms: number, what: string) =>
  Promise.race([
    p,
    new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`timeout: ${what}`)), scaled(ms)).unref())
  ])

/**
 * One runner process on a fresh database of its own and free ports, answering HTTP, stopped at once on a signal
 * (READINESS_GRACE 0: no balancer to wait for), killed when the scope closes; `settings` over those.
 */
export const runnerOnFreshDatabase = (settings: Record<string, string>) =>
  Effect.gen(function*() {
    const { url } = yield* makeTestDatabaseUrl
    const [httpPort, runnerPort] = yield* Effect.all([Effect.promise(allocatePort), Effect.promise(allocatePort)])
    const runner = spawnRunner({
      DATABASE_URL: url,
      HTTP_PORT: String(httpPort),
      RUNNER_PORT: String(runnerPort),
      READINESS_GRACE: "0 seconds",
      ...settings
    })
    yield* Effect.addFinalizer(() => Effect.sync(() => runner.child.kill("SIGKILL")))
    yield* Effect.promise(() => waitForHttp(httpPort, runner))
    return { runner, httpPort }
  })

/** scripts/rocketmq.sh (`topic T G`: a FIFO topic and an orderly consumer group of a test's own; `drop T G`). */
export const rocketmqScript = (...args: Array<string>) =>
  execFileSync("scripts/rocketmq.sh", args, { stdio: "pipe", timeout: scaled(300_000) })
