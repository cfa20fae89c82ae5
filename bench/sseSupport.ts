/** What bench/sse.ts reads of its processes (/proc), its client processes, and how it prints figures. */
import { type ChildProcess, execFileSync, fork } from "node:child_process"
import * as fs from "node:fs"
import { percentile, sleep } from "./support.js"

// ---- the runner's resources, from /proc ----

export const CLK_TCK = (() => {
  try {
    return Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100
  } catch {
    return 100
  }
})()

/** a file of /proc/<pid>/, "" once the process is gone */
export const procFile = (pid: number, name: string) => {
  try {
    return fs.readFileSync(`/proc/${pid}/${name}`, "utf8")
  } catch {
    return ""
  }
}

export const rssKiB = (pid: number) => {
  const m = /VmRSS:\s+(\d+) kB/.exec(procFile(pid, "status"))
  return m === null ? NaN : Number(m[1])
}

/** user + system CPU seconds of a process (all its threads) */
export const cpuSeconds = (pid: number) => {
  const stat = procFile(pid, "stat")
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK
}

export const fdCount = (pid: number) => {
  try {
    return fs.readdirSync(`/proc/${pid}/fd`).length
  } catch {
    return NaN // gone
  }
}

/** A full GC in the runner (bench/memoryProbe.mjs answers SIGUSR2), then its live heap and RSS, in KiB. */
export const probe = async (pid: number, probeFile: string) => {
  fs.rmSync(probeFile, { force: true })
  process.kill(pid, "SIGUSR2")
  for (let i = 0; i < 100 && !fs.existsSync(probeFile); i++) await sleep(100)
  await sleep(200)
  const usage = JSON.parse(fs.readFileSync(probeFile, "utf8")) as { heapUsed: number }
  if (process.env.BENCH_HEAP_SNAPSHOTS === "1") await heapSnapshot(pid)
  return { heapKiB: usage.heapUsed / 1024, rssKiB: rssKiB(pid) }
}

/** Runners this process started that are still alive (a runner that never answered has no handle here). */
/** The machine's TCP sockets in TIME_WAIT (/proc/net/sockstat). */
export const timeWaitSockets = () =>
  Number(/^TCP:.* tw (\d+)/m.exec(fs.readFileSync("/proc/net/sockstat", "utf8"))?.[1] ?? 0)

export const ownRunnerPids = () =>
  fs.readdirSync("/proc").filter((d) => /^\d+$/.test(d)).map(Number).filter((pid) => {
    try {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1])
      return ppid === process.pid && fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("src/runners/main.ts")
    } catch {
      return false
    }
  })

/**
 * With BENCH_HEAP_SNAPSHOTS=1 (and BENCH_NODE_ARGS=--heapsnapshot-signal=SIGUSR1), a heap snapshot of the runner
 * beside each memory probe, written in its working directory: compare two in Chrome's Memory tab to see what a
 * stream holds.
 */
export const heapSnapshot = async (pid: number) => {
  const count = () => fs.readdirSync(".").filter((f) => f.endsWith(".heapsnapshot")).length
  const before = count()
  process.kill(pid, "SIGUSR1")
  for (let i = 0; i < 600 && count() === before; i++) await sleep(100)
  await sleep(3000) // written to the end
}

// ---- client processes ----

export interface Client {
  readonly child: ChildProcess
  readonly next: (type: string) => Promise<any>
  /** `ok` of the latest "progress" message */
  progress: number
}

/** The ceiling server (bench/sseCeiling.mjs) on a free port; resolves with it once it listens. */
export const startCeiling = (env: Record<string, string>) =>
  new Promise<{ child: ChildProcess; port: number }>((resolve, reject) => {
    const child = fork("bench/sseCeiling.mjs", [], {
      execArgv: [
        "--expose-gc",
        "--import",
        "./bench/memoryProbe.mjs",
        // its snapshots beside the gateways', to compare what a stream holds with nothing of ours
        ...(process.env.BENCH_HEAP_SNAPSHOTS === "1" ? ["--heapsnapshot-signal=SIGUSR1"] : [])
      ],
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "inherit", "ipc"]
    })
    child.stdout!.on("data", (d: Buffer) => {
      const m = /listening (\d+)/.exec(d.toString())
      if (m !== null) resolve({ child, port: Number(m[1]) })
    })
    child.on("exit", (code) => reject(new Error(`the ceiling server exited (${code})`)))
  })

export const startClient = (): Promise<Client> => {
  const child = fork("bench/sseClients.mjs", [], { execArgv: [], stdio: ["ignore", "inherit", "inherit", "ipc"] })
  const waiting = new Map<string, Array<{ resolve: (m: any) => void; reject: (e: Error) => void }>>()
  const queued = new Map<string, Array<any>>()
  const client: Client = { child, next: undefined!, progress: 0 }
  child.on("message", (m: any) => {
    if (m.type === "progress") return void (client.progress = m.ok)
    const w = waiting.get(m.type)?.shift()
    if (w !== undefined) w.resolve(m)
    else queued.set(m.type, [...(queued.get(m.type) ?? []), m])
  })
  child.on("exit", (code) => {
    for (const [type, ws] of waiting) {
      for (const w of ws) w.reject(new Error(`client process exited (${code}) waiting for ${type}`))
    }
    waiting.clear()
  })
  const next = (type: string) =>
    new Promise<any>((resolve, reject) => {
      const q = queued.get(type)?.shift()
      if (q !== undefined) return resolve(q)
      if (child.exitCode !== null) return reject(new Error(`client process exited waiting for ${type}`))
      waiting.set(type, [...(waiting.get(type) ?? []), { resolve, reject }])
    })
  ;(client as { next: Client["next"] }).next = next
  return next("ready").then(() => client)
}

/**
 * A server's responsiveness: a request answered at once (an unauthenticated stream request: 401 from the gateway
 * without touching the database) every 250 ms; its round trip is mostly the server's event-loop delay.
 */
export const responsiveness = (url: string) => {
  let samples: Array<number> = []
  let running = true
  void (async () => {
    while (running) {
      const t = performance.now()
      try {
        await (await fetch(url, { signal: AbortSignal.timeout(30_000) })).arrayBuffer()
        samples.push(performance.now() - t)
      } catch {
        samples.push(30_000)
      }
      await sleep(250)
    }
  })()
  return {
    take: () => {
      const s = samples
      samples = []
      return s
    },
    stop: () => (running = false)
  }
}

export const kib = (x: number) => x.toFixed(1)
export const mib = (x: number) => (x / 1024).toFixed(0)
export const ms = (xs: ReadonlyArray<number>, p: number) => xs.length === 0 ? "n/a" : percentile(xs, p).toFixed(0)
export const max = (xs: ReadonlyArray<number>) =>
  xs.length === 0 ? "n/a" : xs.reduce((a, b) => Math.max(a, b)).toFixed(0)
export const orNa = (x: number | null) => x === null ? "n/a" : String(x)
