import { type ChildProcess, spawn } from "node:child_process"
import * as net from "node:net"

/** What the benchmark programs share: ports, a runner process, percentiles. */

export const freePort = () =>
  new Promise<number>((resolve) => {
    const s = net.createServer().listen(0, "127.0.0.1", () => {
      const port = (s.address() as net.AddressInfo).port
      s.close(() => resolve(port))
    })
  })

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/** The p-th percentile (0–100) of the samples; NaN when there are none. */
export const percentile = (xs: ReadonlyArray<number>, p: number) => {
  const sorted = [...xs].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN
}

/**
 * `npm start`'s program as a child process on free ports with the given environment (and node flags); resolves
 * once its HTTP API answers.
 */
export const startRunnerProcess = async (
  env: Record<string, string>,
  options: { readonly nodeArgs?: ReadonlyArray<string>; readonly output?: "inherit" | "ignore" } = {}
) => {
  const [httpPort, runnerPort] = [await freePort(), await freePort()]
  const output = options.output ?? "inherit"
  const child = spawn(process.execPath, [...(options.nodeArgs ?? []), "--import", "tsx", "src/runners/main.ts"], {
    env: {
      ...process.env,
      HTTP_PORT: String(httpPort),
      RUNNER_PORT: String(runnerPort),
      LOG_LEVEL: "ERROR",
      EMBEDDED_SIMULATOR: "false",
      ...env
    },
    stdio: ["ignore", output, output]
  })
  for (let i = 0; i < 240; i++) {
    try {
      if ((await fetch(`http://127.0.0.1:${httpPort}/openapi.json`)).ok) return { child, httpPort }
    } catch {
      // starting
    }
    await sleep(250)
  }
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
