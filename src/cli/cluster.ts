import { Command as Cli, Options } from "@effect/cli"
import { NodeContext, NodeHttpClient, NodeRuntime } from "@effect/platform-node"
import * as Command from "@effect/platform/Command"
import type * as CommandExecutor from "@effect/platform/CommandExecutor"
import * as FileSystem from "@effect/platform/FileSystem"
import * as HttpClient from "@effect/platform/HttpClient"
import { Config, Duration, Effect, Either, Layer, Option, Schedule } from "effect"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as S from "../config/Settings.js"
import { simulatorDefaults, simulatorWanted } from "../runners/EmbeddedSimulator.js"
import { layerLogging } from "../runners/Logging.js"
import { formatRoles } from "../runners/Roles.js"
import { RunnerSettings } from "../runners/RunnerConfig.js"
import { allAreas } from "../runners/settings.js"
import { onRepeatedSignal } from "../runners/signals.js"
import { checkListener, servicesFromEnv } from "../runners/startChecks.js"
import { nginxConf } from "./cluster/nginx.js"
import { type Member, nodeOptionsFor, plan } from "./cluster/plan.js"

/**
 * npm run cluster -- --processes N [--roles "A;B"]: N runner processes on this machine behind one HTTP entry (nginx
 * on HTTP_HOST:HTTP_PORT), each on its own HTTP and runner ports, with the roles given (README, "Production"). The
 * rest of the environment is every process's (DATABASE_URL, REDIS_URL, ROCKETMQ_ENDPOINTS, AUTH_SECRET …). It logs
 * one line per process (pid, ports, roles) and `cluster ready` once every process answers /readyz and the entry
 * answers.
 *
 * Stopping: SIGTERM or SIGINT to this command sends SIGTERM to every runner at once (each stops gracefully: readiness
 * off, READINESS_GRACE, listener closed, shards handed over), then stops nginx gracefully (SIGQUIT) and the
 * simulator, and exits 0 once every one has exited. The children run in process groups of their own, so a terminal's
 * Ctrl-C reaches them only through this command, in that order. A runner that exits by itself stops the others too
 * (exit 1, naming it): one command, one deployment.
 */
const self = fileURLToPath(import.meta.url)
const here = path.dirname(self)
/** Its siblings as this command runs: built (dist/, `npm run cluster`) or from source (under tsx). */
const built = self.endsWith(".js")
const program = (file: string) =>
  built
    ? [path.join(here, `${file}.js`)]
    : ["--import", "tsx", path.join(here, `${file}.ts`)]
const RUNNER = program("../runners/main")
const SIMULATOR = program("../simulator/main")

/** A runner that takes longer than this to stop after SIGTERM is killed (the cluster's own stop is a few seconds). */
const STOP_WITHIN = Duration.seconds(60)

interface Child {
  readonly name: string
  readonly process: CommandExecutor.Process
}

/** The children's process groups, for a repeated signal that ends this command at once (signals.ts). */
const groups = new Set<number>()
onRepeatedSignal(() =>
  groups.forEach((pid) => {
    try {
      process.kill(-pid, "SIGKILL")
    } catch {
      // gone already
    }
  })
)

/** `command` started with the terminal's stdout and stderr (the children's logs are this command's). */
const start = (name: string, command: Command.Command) =>
  Command.start(command.pipe(Command.stdout("inherit"), Command.stderr("inherit"))).pipe(
    Effect.tap((p) => Effect.sync(() => groups.add(p.pid))),
    Effect.map((process): Child => ({ name, process })),
    Effect.mapError((e) => `${name} did not start: ${e.message}`)
  )

/** Fails (naming the child and how it ended) when the child exits: a child never exits by itself while we run. */
const exited = (child: Child) =>
  child.process.exitCode.pipe(
    Effect.either,
    Effect.flatMap((code) =>
      Effect.fail(`${child.name} exited (${Either.match(code, { onLeft: (e) => e.message, onRight: String })})`)
    )
  )

/** SIGTERM (or `signal`), then its exit; SIGKILL if that takes longer than STOP_WITHIN. */
const stop = (child: Child, signal: "SIGTERM" | "SIGQUIT" = "SIGTERM") =>
  child.process.kill(signal).pipe(
    Effect.timeoutFail({ duration: STOP_WITHIN, onTimeout: () => "timed out" }),
    Effect.catchAll((e) =>
      Effect.logWarning(`${child.name} did not stop (${String(e)}): killing it`).pipe(
        Effect.zipRight(child.process.kill("SIGKILL")),
        Effect.ignore
      )
    ),
    Effect.zipRight(Effect.logInfo(`${child.name} stopped`))
  )

/** Until GET `url` answers 200. */
const answers = (url: string) =>
  Effect.flatMap(HttpClient.HttpClient, (client) =>
    client.get(url).pipe(
      Effect.timeout(Duration.seconds(2)),
      Effect.filterOrFail((res) => res.status === 200),
      Effect.retry(Schedule.spaced(Duration.millis(250))),
      Effect.asVoid
    ))

/**
 * Whether `name` is unset in this environment (a default of ours then applies in the children); with `blankIsUnset`,
 * a value of only spaces counts as unset too.
 */
const unset = (name: string, blankIsUnset = false) =>
  Effect.map(
    Config.option(Config.string(name)),
    (value) => Option.isNone(blankIsUnset ? Option.filter(value, (v) => v.trim() !== "") : value)
  )

interface Args {
  readonly processes: number
  readonly roles: Option.Option<string>
  readonly port: Option.Option<number>
  readonly firstHttpPort: Option.Option<number>
  readonly firstRunnerPort: Option.Option<number>
  readonly nginx: string
}

const run = (args: Args) =>
  Effect.gen(function*() {
    yield* S.validateAll(allAreas)
    const settings = yield* RunnerSettings.config
    const services = yield* servicesFromEnv
    if (!services.database) {
      return yield* Effect.fail(
        "DATABASE_URL: required: the processes share one PostgreSQL (the embedded PGlite serves one process: npm start)"
      )
    }
    const entryPort = Option.getOrElse(args.port, () => settings.httpPort)
    const members = yield* plan({
      processes: args.processes,
      roles: args.roles,
      entryPort,
      firstHttpPort: Option.getOrElse(args.firstHttpPort, () => entryPort + 1),
      firstRunnerPort: Option.getOrElse(args.firstRunnerPort, () => settings.runnerPort),
      services
    })
    yield* checkListener
    const fs = yield* FileSystem.FileSystem
    if (!(yield* fs.exists(args.nginx))) {
      return yield* Effect.fail(
        `nginx not found at ${args.nginx} (Debian: apt-get install nginx-light; or --nginx PATH)`
      )
    }

    // nginx's pid file and temporary files; its workers (nobody, when started as root) write their buffers there
    const dir = yield* fs.makeTempDirectoryScoped({ prefix: "tcp-cluster-" })
    yield* fs.chmod(dir, 0o755)
    const conf = path.join(dir, "nginx.conf")
    yield* fs.writeFileString(conf, nginxConf({ listenHost: settings.httpHost, listenPort: entryPort, members, dir }))
    const host = settings.httpHost === "0.0.0.0" || settings.httpHost === "::" ? "127.0.0.1" : settings.httpHost
    const entry = `http://${host.includes(":") ? `[${host}]` : host}:${entryPort}`

    // the children's environment: ours, over the simulator's defaults (as under npm start), under their own ports
    const defaults: Record<string, string> = {}
    const sim = yield* simulatorWanted
    if (Option.isSome(sim)) {
      for (const [name, value] of Object.entries(simulatorDefaults(entry, `http://127.0.0.1:${sim.value}`))) {
        if (yield* unset(name)) defaults[name] = value
      }
    }
    if (yield* unset("PUBLIC_BASE_URL")) defaults.PUBLIC_BASE_URL = entry
    const nodeOptionsUnset = yield* unset("NODE_OPTIONS", true)
    const runnerEnv = (m: Member, nodeOptions: Option.Option<string>) => ({
      ...defaults,
      ...Option.match(nodeOptions, { onNone: () => ({}), onSome: (o) => ({ NODE_OPTIONS: o }) }),
      HTTP_HOST: "127.0.0.1",
      HTTP_PORT: String(m.httpPort),
      RUNNER_PORT: String(m.runnerPort),
      RUNNER_ROLES: formatRoles(m.roles),
      EMBEDDED_SIMULATOR: "false"
    })

    const children: Array<Child> = []
    const tail: Array<Child> = []
    if (Option.isSome(sim)) {
      const simulator = yield* start(
        "simulator",
        Command.make(process.execPath, ...SIMULATOR).pipe(Command.env({
          SIM_PORT: String(sim.value),
          SIM_OPENAI_WEBHOOK_URL: `${entry}/webhooks/openai`
        }))
      )
      tail.push(simulator)
      yield* Effect.logInfo(`provider simulator on 127.0.0.1:${sim.value}`).pipe(
        Effect.annotateLogs({ pid: simulator.process.pid })
      )
    }
    const nginx = yield* start("nginx", Command.make(args.nginx, "-p", dir, "-c", conf, "-e", "stderr"))
    tail.unshift(nginx)
    yield* Effect.logInfo(`nginx on ${settings.httpHost}:${entryPort}`).pipe(
      Effect.annotateLogs({ pid: nginx.process.pid, config: conf })
    )
    for (const m of members) {
      const nodeOptions = nodeOptionsUnset ? nodeOptionsFor(m.roles) : Option.none<string>()
      const child = yield* start(
        `process ${m.index}`,
        Command.make(process.execPath, ...RUNNER).pipe(Command.env(runnerEnv(m, nodeOptions)))
      )
      children.push(child)
      yield* Effect.logInfo(`process ${m.index} started`).pipe(Effect.annotateLogs({
        process: m.index,
        pid: child.process.pid,
        http: `127.0.0.1:${m.httpPort}`,
        runner: `${settings.runnerHost}:${m.runnerPort}`,
        roles: formatRoles(m.roles),
        node_options: Option.getOrElse(nodeOptions, () => "")
      }))
    }
    // runs first when the scope closes (added last): every runner at once, then nginx and the simulator
    yield* Effect.addFinalizer(() =>
      Effect.forEach(children, (c) => stop(c), { concurrency: "unbounded", discard: true }).pipe(
        Effect.zipRight(Effect.forEach(tail, (c) => stop(c, c === nginx ? "SIGQUIT" : "SIGTERM"), { discard: true })),
        Effect.zipRight(Effect.logInfo("cluster stopped: every process exited"))
      )
    )

    const anyExit = Effect.raceAll([...children, ...tail].map(exited))
    const ready = Effect.gen(function*() {
      yield* Effect.forEach(members, (m) => answers(`http://127.0.0.1:${m.httpPort}/readyz`), {
        concurrency: "unbounded"
      })
      yield* answers(`${entry}/healthz`)
      yield* Effect.logInfo(`cluster ready: ${entry}`).pipe(
        Effect.annotateLogs({ entry, processes: members.length, pids: children.map((c) => c.process.pid).join(",") })
      )
      return yield* Effect.never
    })
    return yield* Effect.raceFirst(ready, anyExit)
  }).pipe(
    Effect.scoped,
    Effect.catchTag("ConfigError", (e) => Effect.fail(S.describe(e))),
    Effect.mapError((e) => typeof e === "string" ? e : e.message)
  )

const processes = Options.integer("processes").pipe(Options.withDescription("runner processes on this machine"))
const roles = Options.text("roles").pipe(
  Options.optional,
  Options.withDescription(
    "role sets separated by ';', given to the processes in turn (\"api,webhooks,gateway;entities,singletons," +
      "dispatcher\"); default: every role in every process"
  )
)
const port = Options.integer("port").pipe(
  Options.optional,
  Options.withDescription("the one HTTP entry (nginx); default HTTP_PORT")
)
const firstHttpPort = Options.integer("first-http-port").pipe(
  Options.optional,
  Options.withDescription("HTTP port of process 1 (the next ones follow); default: the entry's + 1")
)
const firstRunnerPort = Options.integer("first-runner-port").pipe(
  Options.optional,
  Options.withDescription("runner-to-runner port of process 1 (the next ones follow); default RUNNER_PORT")
)
const nginx = Options.text("nginx").pipe(Options.withDefault("/usr/sbin/nginx"), Options.withDescription("nginx"))

const cluster = Cli.make("cluster", { processes, roles, port, firstHttpPort, firstRunnerPort, nginx }, run).pipe(
  Cli.withDescription("runner processes on this machine behind one nginx entry; stopped together by one signal")
)

Cli.run(cluster, { name: "cluster", version: "0.1.0" })(process.argv).pipe(
  Effect.catchAll((line) =>
    Effect.sync(() => {
      process.stderr.write(`cluster: ${typeof line === "string" ? line : String(line)}\n`)
      process.exitCode = 1
    })
  ),
  Effect.provide(Layer.mergeAll(NodeContext.layer, NodeHttpClient.layerUndici, layerLogging)),
  NodeRuntime.runMain({ disableErrorReporting: true })
)
