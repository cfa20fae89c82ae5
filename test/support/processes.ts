import { type ChildProcess, spawn } from "node:child_process"

export interface Proc {
  readonly child: ChildProcess
  readonly output: () => string
  readonly exited: Promise<number | null>
}

/**
 * Every process a test starts carries this mark in its environment. The suite's global teardown
 * (test/support/globalSetup.ts) kills whatever still carries it, so a runner outlives neither a test that timed out
 * nor a worker that was killed.
 */
export const TEST_PROCESS_MARK = "TCP_TEST_PROCESS"
/** The run's id, set by the global setup and inherited by the test workers (which do not carry the mark). */
export const TEST_RUN_ID = "TCP_TEST_RUN_ID"
const runId = process.env[TEST_RUN_ID] ?? `pid-${process.pid}`

const children = new Set<ChildProcess>()
process.once("exit", () => {
  for (const child of children) child.kill("SIGKILL")
})

/**
 * `npm start`'s program (src/runners/main.ts) as a child process with the given environment; without its embedded
 * provider simulator unless `env` asks for it (several runners would all want its port).
 */
export const spawnRunner = (env: NodeJS.ProcessEnv): Proc => {
  const child = spawn(process.execPath, ["--import", "tsx", "src/runners/main.ts"], {
    env: { EMBEDDED_SIMULATOR: "false", ...env, [TEST_PROCESS_MARK]: runId },
    stdio: "pipe"
  })
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
export const waitForHttp = async (port: number, proc: Proc, timeoutMs = 120_000) => {
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

export const withTimeout = <A>(p: Promise<A>, ms: number, what: string) =>
  Promise.race([p, new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`timeout: ${what}`)), ms))])
