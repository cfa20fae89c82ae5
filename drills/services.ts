/**
 * Service instances of a drill's (or the soak's) own, so that breaking them disturbs nothing else on the machine:
 * a PostgreSQL 15 cluster (initdb, as the postgres user, on its own port and folder), a Redis, a RocketMQ
 * (scripts/rocketmq.sh with its own ports, data and store). Each can be stopped and started again on the same port
 * and data; `remove` stops it and deletes its data.
 */
import { spawn, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { freePort } from "../bench/support.js"
import { waitFor } from "./stage.js"

const PG_BIN = "/usr/lib/postgresql/15/bin"

const run = (command: string, args: ReadonlyArray<string>, env: Record<string, string> = {}) => {
  const r = spawnSync(command, args, { env: { ...process.env, ...env }, encoding: "utf8" })
  if (r.status !== 0) throw new Error(`${command} ${args.join(" ")}: exit ${r.status}\n${r.stdout}${r.stderr}`)
  return r.stdout
}

/** Runs a PostgreSQL program as the postgres user (initdb refuses root), or as ourselves when we are not root. */
const asPostgres = (program: string, args: ReadonlyArray<string>) =>
  process.getuid?.() === 0
    ? run("runuser", ["-u", "postgres", "--", path.join(PG_BIN, program), ...args])
    : run(path.join(PG_BIN, program), args)

const portOpen = (port: number) =>
  new Promise<boolean>((resolve) => {
    const s = net.connect(port, "127.0.0.1")
    s.once("connect", () => {
      s.destroy()
      resolve(true)
    })
    s.once("error", () => resolve(false))
  })

export interface OwnPostgres {
  readonly port: number
  readonly dir: string
  readonly adminUrl: string
  readonly start: () => Promise<void>
  readonly stop: (mode?: "fast" | "immediate") => void
  readonly remove: () => void
}

const pgInstance = (dir: string, port: number): OwnPostgres => {
  const start = async () => {
    asPostgres("pg_ctl", ["-D", dir, "-l", path.join(dir, "server.log"), "-w", "-t", "120", "start"])
    await waitFor(`PostgreSQL on ${port}`, () => portOpen(port), 60_000)
  }
  const stop = (mode: "fast" | "immediate" = "fast") => {
    try {
      asPostgres("pg_ctl", ["-D", dir, "-m", mode, "-w", "-t", "60", "stop"])
    } catch {
      // already stopped
    }
  }
  return {
    port,
    dir,
    adminUrl: `postgres://postgres@127.0.0.1:${port}/postgres`,
    start,
    stop,
    remove: () => {
      stop("immediate")
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }
}

const pgDir = (name: string) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `${name}-pg-`))
  if (process.getuid?.() === 0) run("chown", ["postgres:postgres", dir])
  return dir
}

const writeConf = (dir: string, port: number, extra: ReadonlyArray<string> = []) =>
  fs.appendFileSync(
    path.join(dir, "postgresql.conf"),
    [
      `port = ${port}`,
      "listen_addresses = '127.0.0.1'",
      `unix_socket_directories = '${dir}'`,
      "max_connections = 200",
      "shared_buffers = 64MB",
      "fsync = on",
      "wal_level = replica",
      "max_wal_senders = 5",
      ...extra,
      ""
    ].join("\n")
  )

/** A new PostgreSQL 15 cluster of its own (trust auth on 127.0.0.1), started. */
export const ownPostgres = async (name: string, extraConf: ReadonlyArray<string> = []): Promise<OwnPostgres> => {
  const port = await freePort()
  const dir = pgDir(name)
  asPostgres("initdb", ["-D", dir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-instructions"])
  fs.appendFileSync(path.join(dir, "pg_hba.conf"), "host replication all 127.0.0.1/32 trust\n")
  writeConf(dir, port, extraConf)
  const instance = pgInstance(dir, port)
  await instance.start()
  return instance
}

/** pg_basebackup of `primary` into `dir`, the WAL it needs streamed with it. */
const basebackup = (primary: OwnPostgres, dir: string, extra: ReadonlyArray<string>) =>
  asPostgres("pg_basebackup", [
    "-h",
    "127.0.0.1",
    "-p",
    String(primary.port),
    "-U",
    "postgres",
    "-D",
    dir,
    "-X",
    "stream",
    ...extra
  ])

/** A streaming replica of `primary` (pg_basebackup -R), started: read-only until promoted. */
export const ownReplica = async (
  name: string,
  primary: OwnPostgres
): Promise<OwnPostgres & { promote: () => void }> => {
  const port = await freePort()
  const dir = pgDir(name)
  basebackup(primary, dir, ["-R"])
  writeConf(dir, port)
  const instance = pgInstance(dir, port)
  await instance.start()
  return { ...instance, promote: () => void asPostgres("pg_ctl", ["-D", dir, "-w", "promote"]) }
}

export interface OwnRedis {
  readonly port: number
  readonly url: string
  readonly start: () => Promise<void>
  readonly stop: () => Promise<void>
}

/** A Redis of its own (nothing kept on disk, as the machine's), started. */
export const ownRedis = async (): Promise<OwnRedis> => {
  const port = await freePort()
  let child: ReturnType<typeof spawn> | undefined
  const start = async () => {
    child = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], {
      stdio: "ignore"
    })
    await waitFor(`Redis on ${port}`, () => portOpen(port), 30_000)
  }
  const stop = async () => {
    if (child === undefined || child.exitCode !== null) return
    const exited = new Promise((r) => child!.once("exit", r))
    child.kill("SIGKILL")
    await exited
  }
  await start()
  return { port, url: `redis://127.0.0.1:${port}`, start, stop }
}

export interface OwnRocketMQ {
  readonly endpoints: string
  readonly start: () => Promise<void>
  readonly stop: () => Promise<void>
  readonly remove: () => Promise<void>
}

/** Whether we may listen on the port (nothing listens there, and no connection holds it as its local port). */
const canBind = (port: number) =>
  new Promise<boolean>((resolve) => {
    const s = net.createServer()
    s.once("error", () => resolve(false))
    s.listen({ port, host: "127.0.0.1", exclusive: true }, () => s.close(() => resolve(true)))
  })

/** The script, without blocking this process's event loop (a restart takes a minute). */
const script = (args: ReadonlyArray<string>, env: Record<string, string>) =>
  new Promise<void>((resolve, reject) => {
    const child = spawn("scripts/rocketmq.sh", args, {
      env: { ...process.env, ...env },
      stdio: ["ignore", "ignore", "inherit"]
    })
    child.once(
      "exit",
      (code) => (code === 0 ? resolve() : reject(new Error(`scripts/rocketmq.sh ${args.join(" ")}: exit ${code}`)))
    )
  })

/** A RocketMQ (NameServer + Proxy) of its own: its own ports, data and store (about 45 s to start here). */
export const ownRocketMQ = async (name: string): Promise<OwnRocketMQ> => {
  const [namesrv, proxy, remoting] = [await freePort(), await freePort(), await freePort()]
  // The broker takes its port, the one 2 below (fast remoting) and the one above (HA): a block of 4 we can bind,
  // below the kernel's ephemeral range. Inside it, an outbound connection (a runner's to PostgreSQL, say) may take
  // the HA port between this check and the JVM's bind, seconds later: the soak's broker once failed so in CI
  // ("BindException: Address already in use" at DefaultHAService).
  const [ephemeralLow] = fs.readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/).map(
    Number
  )
  const top = Math.max(20_010, (ephemeralLow ?? 32_768) - 4)
  let broker = 0
  for (let tries = 0; tries < 50 && broker === 0; tries++) {
    const p = 20_002 + Math.floor(Math.random() * (top - 20_002))
    if ((await canBind(p - 2)) && (await canBind(p)) && (await canBind(p + 1))) broker = p
  }
  if (broker === 0) throw new Error(`no free block of 4 ports for the broker between 20000 and ${top}`)
  const data = fs.mkdtempSync(path.join(os.tmpdir(), `${name}-rocketmq-`))
  const store = `/dev/shm/${path.basename(data)}`
  const env = {
    ROCKETMQ_DATA: data,
    ROCKETMQ_STORE: store,
    ROCKETMQ_NAMESRV_PORT: String(namesrv),
    ROCKETMQ_PROXY_PORT: String(proxy),
    ROCKETMQ_REMOTING_PORT: String(remoting),
    ROCKETMQ_BROKER_PORT: String(broker)
  }
  const start = () => script(["up"], env)
  const stop = () => script(["down"], env)
  await start()
  return {
    endpoints: `127.0.0.1:${proxy}`,
    start,
    stop,
    remove: async () => {
      await stop().catch(() => undefined)
      fs.rmSync(data, { recursive: true, force: true })
      fs.rmSync(store, { recursive: true, force: true })
    }
  }
}

export interface WalArchive {
  readonly dir: string
  /** ownPostgres's extra settings: archive every WAL segment into `dir` (never over one already there) */
  readonly conf: ReadonlyArray<string>
  /** whether the segment of `walFile` (pg_walfile_name) is in the archive */
  readonly has: (walFile: string) => boolean
  readonly remove: () => void
}

/** A WAL archive folder of its own, written by the primary's archiver (as the postgres user). */
export const walArchive = (name: string): WalArchive => {
  const dir = pgDir(`${name}-wal`)
  return {
    dir,
    conf: ["archive_mode = on", `archive_command = 'test ! -f ${dir}/%f && cp %p ${dir}/%f'`],
    has: (walFile) => fs.existsSync(path.join(dir, walFile)),
    remove: () => fs.rmSync(dir, { recursive: true, force: true })
  }
}

/** A base backup of `primary` (pg_basebackup, the WAL it needs streamed with it) in a folder of its own. */
export const baseBackup = (name: string, primary: OwnPostgres) => {
  const dir = pgDir(`${name}-base`)
  basebackup(primary, dir, ["-c", "fast"])
  return dir
}

/**
 * A new cluster made of the base backup in `backupDir` (used in place) set to recover from `archive` up to the
 * restore point `target` and promote there (recovery.signal), on its own port and without archiving. Not started:
 * its `start` is the replay (pg_ctl waits until it takes connections; it is read-write once promoted).
 */
export const restoredPostgres = async (backupDir: string, archive: WalArchive, target: string) => {
  const port = await freePort()
  writeConf(backupDir, port, [
    "archive_mode = off",
    `restore_command = 'cp ${archive.dir}/%f %p'`,
    `recovery_target_name = '${target}'`,
    "recovery_target_action = 'promote'"
  ])
  const signal = path.join(backupDir, "recovery.signal")
  fs.writeFileSync(signal, "")
  if (process.getuid?.() === 0) run("chown", ["postgres:postgres", signal])
  return pgInstance(backupDir, port)
}
