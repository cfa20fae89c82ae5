import { type ChildProcess, spawn } from "node:child_process"

export interface Proc {
  readonly child: ChildProcess
  readonly output: () => string
  readonly exited: Promise<number | null>
}

/**
 * `npm start`'s program (src/runners/main.ts) as a child process with the given environment; without its embedded
 * provider simulator unless `env` asks for it (several runners would all want its port).
 */
export const spawnRunner = (env: NodeJS.ProcessEnv): Proc => {
  const child = spawn(process.execPath, ["--import", "tsx", "src/runners/main.ts"], {
    env: { EMBEDDED_SIMULATOR: "false", ...env },
    stdio: "pipe"
  })
  let out = ""
  child.stdout!.on("data", (d) => (out += d))
  child.stderr!.on("data", (d) => (out += d))
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)))
  return { child, output: () => out, exited }
}

export const waitForHttp = async (port: number, proc: Proc) => {
  const deadline = Date.now() + 60_000
  while (Date.now() < deadline) {
    if (proc.child.exitCode !== null) throw new Error(`runner exited early:\n${proc.output()}`)
    try {
      const res = await fetch(`http://127.0.0.1:${port}/openapi.json`)
      if (res.ok) return
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 250))
  }
  throw new Error(`runner did not start:\n${proc.output()}`)
}

export const withTimeout = <A>(p: Promise<A>, ms: number, what: string) =>
  Promise.race([p, new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`timeout: ${what}`)), ms))])
