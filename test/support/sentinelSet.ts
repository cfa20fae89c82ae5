import { Duration, Effect, Schedule, type Scope } from "effect"
import { Redis as IORedis } from "ioredis"
import type { ChildProcess } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { isCI, scaledDuration } from "./env.js"
import { allocatePort } from "./ports.js"

/** Debian's binaries (`.ci/run` installs redis-sentinel when it is missing). */
const REDIS_SERVER = "/usr/bin/redis-server"
const REDIS_SENTINEL = "/usr/bin/redis-sentinel"
export const hasSentinel = fs.existsSync(REDIS_SERVER) && fs.existsSync(REDIS_SENTINEL)
if (!hasSentinel && isCI) {
  throw new Error(`CI=true but ${REDIS_SERVER} or ${REDIS_SENTINEL} is missing: .ci/run installs redis-sentinel`)
}

export const MASTER_NAME = "tcp-test"

/**
 * A Redis master, its replica and three Sentinels (quorum 2) of the test's own: free ports, a temporary folder, killed
 * and removed when the scope closes (the suite's teardown kills them too, by their mark, if the worker dies).
 */
export interface SentinelSet {
  readonly sentinels: ReadonlyArray<{ readonly host: string; readonly port: number }>
  /** the two redis-server ports */
  readonly servers: ReadonlyArray<number>
  /** the master's port, as every Sentinel names it (dies if they disagree for longer than `within`) */
  readonly master: Effect.Effect<number>
  /** a connection of the test's own to one server, closed with the scope */
  readonly connect: (port: number) => Effect.Effect<IORedis, never, Scope.Scope>
  /** SENTINEL FAILOVER once the replica is in sync; returns when every Sentinel names the new master */
  readonly failover: Effect.Effect<{ readonly from: number; readonly to: number }>
  /** SIGKILLs the master; returns when every Sentinel names the replica as master (the old one stays down) */
  readonly killMaster: Effect.Effect<{ readonly from: number; readonly to: number }>
}

const poll = <A>(what: string, attempt: () => Promise<A | undefined>, within: Duration.DurationInput) => {
  let last: unknown = "nothing yet"
  return Effect.tryPromise(attempt).pipe(
    Effect.tapError((e) => Effect.sync(() => (last = e))),
    Effect.flatMap((a) => a === undefined ? Effect.fail("not yet") : Effect.succeed(a)),
    Effect.retry(Schedule.spaced(Duration.millis(100)).pipe(Schedule.upTo(scaledDuration(within)))),
    Effect.catchAll(() => Effect.dieMessage(`${what}: not within ${Duration.format(within)}; last: ${String(last)}`))
  )
}

/** One command on a short-lived connection (no retries: the caller polls). */
const once = async <A>(port: number, run: (c: IORedis) => Promise<A>) => {
  const c = new IORedis({
    port,
    host: "127.0.0.1",
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null
  })
  c.on("error", () => undefined)
  try {
    await c.connect()
    return await run(c)
  } finally {
    c.disconnect()
  }
}

const field = (info: string, name: string) => new RegExp(`^${name}:(.*)\r?$`, "m").exec(info)?.[1]?.trim()

/** A started process: the spawner of the caller's (marked test processes, or a drill's plain children). */
export interface SetProcess {
  readonly child: ChildProcess
  readonly exited: Promise<unknown>
}
export type Spawner = (command: string, args: ReadonlyArray<string>) => SetProcess

export const startSentinelSetWith = (
  spawner: Spawner
): Effect.Effect<SentinelSet, never, Scope.Scope> =>
  Effect.gen(function*() {
    const dir = yield* Effect.acquireRelease(
      Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "tcp-sentinel-"))),
      (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
    )
    const procs = new Map<number, SetProcess>()
    yield* Effect.addFinalizer(() =>
      Effect.promise(() =>
        Promise.all([...procs.values()].map((p) => {
          if (p.child.exitCode !== null || p.child.signalCode !== null) return Promise.resolve()
          p.child.kill("SIGKILL")
          return p.exited
        }))
      )
    )
    const spawn = (port: number, command: string, args: ReadonlyArray<string>) =>
      Effect.sync(() => procs.set(port, spawner(command, args)))
    const [m, r, ...s] = yield* Effect.promise(() => Promise.all(Array.from({ length: 5 }, allocatePort)))
    const servers = [m!, r!]
    for (const port of servers) {
      const data = path.join(dir, `redis-${port}`)
      fs.mkdirSync(data)
      yield* spawn(port, REDIS_SERVER, [
        ...["--port", String(port), "--bind", "127.0.0.1", "--dir", data, "--save", "", "--appendonly", "no"],
        ...(port === r ? ["--replicaof", "127.0.0.1", String(m)] : [])
      ])
    }
    const sentinels = s.map((port) => ({ host: "127.0.0.1", port }))
    for (const { port } of sentinels) {
      const conf = path.join(dir, `sentinel-${port}.conf`)
      fs.writeFileSync(
        conf,
        [
          `port ${port}`,
          "bind 127.0.0.1",
          `dir ${dir}`,
          `sentinel monitor ${MASTER_NAME} 127.0.0.1 ${m} 2`,
          `sentinel down-after-milliseconds ${MASTER_NAME} 1000`,
          `sentinel failover-timeout ${MASTER_NAME} 10000`,
          `sentinel parallel-syncs ${MASTER_NAME} 1`,
          ""
        ].join("\n")
      )
      yield* spawn(port, REDIS_SENTINEL, [conf])
    }

    const masterOf = (sentinel: number) =>
      once(sentinel, (c) => c.call("SENTINEL", "get-master-addr-by-name", MASTER_NAME) as Promise<[string, string]>)
        .then(([, port]) => Number(port))
    /** The master every Sentinel names, when they agree; undefined otherwise. */
    const agreed = async () => {
      const named = await Promise.all(sentinels.map((x) => masterOf(x.port)))
      return named.every((p) => p === named[0]) ? named[0] : undefined
    }
    /** The replica is in sync with `master`, and every Sentinel knows it and its two peers. */
    const settled = (master: number) => async () => {
      const replica = servers.find((p) => p !== master)!
      const info = await once(replica, (c) => c.info("replication"))
      if (field(info, "master_port") !== String(master) || field(info, "master_link_status") !== "up") return undefined
      for (const x of sentinels) {
        const replicas = await once(x.port, (c) => c.call("SENTINEL", "replicas", MASTER_NAME)) as Array<Array<string>>
        const known = replicas.some((row) =>
          row[row.indexOf("port") + 1] === String(replica) &&
          !/s_down|disconnected/.test(row[row.indexOf("flags") + 1]!)
        )
        const peers = await once(x.port, (c) => c.call("SENTINEL", "sentinels", MASTER_NAME)) as Array<unknown>
        if (!known || peers.length < sentinels.length - 1) return undefined
      }
      return true
    }
    const switched = (from: number) => async () => {
      const now = await agreed()
      if (now === undefined || now === from) return undefined
      const role = await once(now, (c) => c.info("replication"))
      return field(role, "role") === "master" ? now : undefined
    }

    yield* poll("the Sentinels watch the master and its replica", settled(m!), "30 seconds")
    const master = poll("the Sentinels agree on the master", agreed, "30 seconds")

    return {
      sentinels,
      servers,
      master,
      connect: (port) =>
        Effect.acquireRelease(
          Effect.sync(() => {
            const c = new IORedis({ port, host: "127.0.0.1", maxRetriesPerRequest: 1 })
            c.on("error", () => undefined)
            return c
          }),
          (c) => Effect.sync(() => c.disconnect())
        ),
      failover: Effect.gen(function*() {
        const from = yield* master
        yield* poll("the replica is in sync before the failover", settled(from), "30 seconds")
        yield* poll(
          "SENTINEL FAILOVER accepted",
          () => once(sentinels[0]!.port, (c) => c.call("SENTINEL", "failover", MASTER_NAME)),
          "10 seconds"
        )
        const to = yield* poll("every Sentinel names the new master", switched(from), "30 seconds")
        return { from, to }
      }),
      killMaster: Effect.gen(function*() {
        const from = yield* master
        yield* poll("the replica is in sync before the kill", settled(from), "30 seconds")
        const proc = procs.get(from)!
        yield* Effect.promise(() => {
          proc.child.kill("SIGKILL")
          return proc.exited
        })
        const to = yield* poll("every Sentinel names the promoted replica", switched(from), "60 seconds")
        return { from, to }
      })
    } satisfies SentinelSet
  })
