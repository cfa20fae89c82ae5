import { spawn } from "node:child_process"
import { randomUUID } from "node:crypto"
import { readdirSync, readFileSync } from "node:fs"
import { inject } from "vitest"
import { processEnv, scaled, TEST_PROCESS_MARK } from "./env.js"
import type { Proc } from "./processes.js"

/** The environment variable naming one `npm start` of a test: every process it starts inherits it. */
const START_MARK = "TCP_TEST_NPM_START"

export interface NpmStart extends Proc {
  /** Every live process carrying this start's mark: npm and whatever it started, however deep or reparented. */
  readonly processes: () => ReadonlyArray<{ readonly pid: number; readonly command: string }>
}

/**
 * `npm start` itself (package.json's script, through npm and its shell), as a user runs it, with exactly `settings`
 * (plus PATH and the like). Its own process group, so that a test can signal npm alone, as a supervisor would.
 */
export const spawnNpmStart = (settings: Record<string, string>): NpmStart => spawnNpm(["start"], settings)

/** `npm …args` (`["run", "cluster", "--", …]`) the same way as `spawnNpmStart`. */
export const spawnNpm = (args: ReadonlyArray<string>, settings: Record<string, string>): NpmStart => {
  const mark = randomUUID()
  const child = spawn("npm", args, {
    env: { ...processEnv(settings), [TEST_PROCESS_MARK]: inject("testRunId"), [START_MARK]: mark },
    stdio: "pipe",
    detached: true
  })
  let out = ""
  child.stdout.on("data", (d) => (out += d))
  child.stderr.on("data", (d) => (out += d))
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)))
  return { child, output: () => out, exited, processes: () => marked(`${START_MARK}=${mark}`) }
}

/** Live processes whose environment holds `entry` (zombies, which have no environment left, are not live). */
const marked = (entry: string) => {
  const found: Array<{ pid: number; command: string }> = []
  for (const name of readdirSync("/proc")) {
    const pid = Number(name)
    if (!Number.isInteger(pid)) continue
    try {
      if (readFileSync(`/proc/${pid}/environ`, "latin1").split("\0").includes(entry)) {
        found.push({ pid, command: readFileSync(`/proc/${pid}/cmdline`, "latin1").split("\0").join(" ").trim() })
      }
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return found
}

/** Kills what is left of a start (its process group, and anything marked that left it). */
export const killAll = (start: NpmStart) => {
  try {
    process.kill(-start.child.pid!, "SIGKILL")
  } catch {
    // the group is gone
  }
  for (const { pid } of start.processes()) {
    try {
      process.kill(pid, "SIGKILL")
    } catch {
      // gone
    }
  }
}

export type ProbeAnswer = number | "refused" | "no answer"

/** One GET of `path`, its status, or how it failed. */
export const probe = async (port: number, path: string, timeoutMs = 2_000): Promise<ProbeAnswer> => {
  try {
    const res = await fetch(`http://127.0.0.1:${port}${path}`, { signal: AbortSignal.timeout(timeoutMs) })
    await res.arrayBuffer()
    return res.status
  } catch (e) {
    const code = (e as { cause?: { code?: string } }).cause?.code
    return code === "ECONNREFUSED" || code === "ECONNRESET" || code === "UND_ERR_SOCKET" ? "refused" : "no answer"
  }
}

/** Polls `/readyz` until it answers 200 (or the process exits, or `within`, scaled, passes). */
export const waitForReady = async (port: number, proc: Proc, within = 180_000) => {
  const deadline = Date.now() + scaled(within)
  while (Date.now() < deadline) {
    if (proc.child.exitCode !== null) throw new Error(`runner exited early:\n${proc.output()}`)
    if ((await probe(port, "/readyz")) === 200) return
    await new Promise((r) => setTimeout(r, 250))
  }
  throw new Error(`runner not ready on ${port} within ${scaled(within)} ms:\n${proc.output()}`)
}
