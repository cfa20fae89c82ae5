import { describe, expect, it } from "@effect/vitest"
import { Either, Option } from "effect"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { nginxConf } from "../../src/cli/cluster/nginx.js"
import { nodeOptionsFor, plan, type PlanInput, WORKER_NODE_OPTIONS } from "../../src/cli/cluster/plan.js"
import { allRoles, formatRoles, parseRoles } from "../../src/runners/Roles.js"

const input = (over: Partial<PlanInput> = {}): PlanInput => ({
  processes: 2,
  roles: Option.none(),
  entryPort: 3000,
  firstHttpPort: 3001,
  firstRunnerPort: 34431,
  services: { database: true, redis: true, rocketmq: true },
  ...over
})

const refusal = (over: Partial<PlanInput>) => Either.match(plan(input(over)), { onLeft: (l) => l, onRight: () => "ok" })

describe("npm run cluster's plan", () => {
  it("gives every process every role by default, on consecutive ports", () => {
    const members = Either.getOrThrow(plan(input({ processes: 3 })))
    expect(members.map((m) => [m.index, m.httpPort, m.runnerPort, formatRoles(m.roles)])).toEqual([
      [1, 3001, 34431, "api,webhooks,gateway,entities,singletons,dispatcher"],
      [2, 3002, 34432, "api,webhooks,gateway,entities,singletons,dispatcher"],
      [3, 3003, 34433, "api,webhooks,gateway,entities,singletons,dispatcher"]
    ])
  })

  it("hands role sets to the processes in turn", () => {
    const members = Either.getOrThrow(
      plan(input({ processes: 4, roles: Option.some("api,webhooks,gateway;entities,singletons,dispatcher") }))
    )
    expect(members.map((m) => formatRoles(m.roles))).toEqual([
      "api,webhooks,gateway",
      "entities,singletons,dispatcher",
      "api,webhooks,gateway",
      "entities,singletons,dispatcher"
    ])
  })

  it("refuses what cannot be deployed, with one line", () => {
    expect(refusal({ processes: 0 })).toBe("--processes: must be a whole number ≥ 1, got 0")
    expect(refusal({ roles: Option.some("api;webhooks;entities") })).toBe("--roles: 3 role sets for 2 process(es)")
    expect(refusal({ roles: Option.some("api,relay") })).toContain("--roles: unknown role \"relay\"")
    expect(refusal({ roles: Option.some("api,webhooks,gateway;singletons,dispatcher") })).toContain(
      "--roles: singletons,dispatcher: singletons needs entities"
    )
    expect(refusal({ roles: Option.some("api,webhooks,entities,singletons,dispatcher") })).toBe(
      "--roles: no process has gateway: every role must run somewhere"
    )
    expect(
      refusal({
        roles: Option.some("api,webhooks,gateway;entities,singletons,dispatcher"),
        services: { database: true, redis: false, rocketmq: true }
      })
    ).toContain("--roles: api,webhooks,gateway: gateway without dispatcher needs REDIS_URL")
    expect(refusal({ entryPort: 3002 })).toBe("port 3002 is given twice: the entry, HTTP and runner ports overlap")
    expect(refusal({ firstRunnerPort: 65_535 })).toBe("port 65536 is out of range: choose lower first ports")
  })

  it.skipIf(!fs.existsSync("/usr/sbin/nginx"))("writes a configuration nginx accepts, with a pool per role", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "cluster-plan-"))
    try {
      const members = Either.getOrThrow(
        plan(
          input({ processes: 3, roles: Option.some("api,webhooks,gateway;entities,singletons,dispatcher;webhooks") })
        )
      )
      const conf = nginxConf({ listenHost: "127.0.0.1", listenPort: 3000, members, dir })
      fs.writeFileSync(path.join(dir, "nginx.conf"), conf)
      const checked = spawnSync("/usr/sbin/nginx", [
        "-t",
        "-p",
        dir,
        "-c",
        path.join(dir, "nginx.conf"),
        "-e",
        "stderr"
      ], {
        encoding: "utf8"
      })
      expect(checked.status, checked.stderr).toBe(0)
      const pool = (name: string) =>
        conf.slice(conf.indexOf(`upstream ${name} {`), conf.indexOf("}", conf.indexOf(`upstream ${name} {`)))
      expect(pool("api").match(/server 127\.0\.0\.1:\d+/g)).toEqual(["server 127.0.0.1:3001"])
      expect(pool("webhooks").match(/server 127\.0\.0\.1:\d+/g)).toEqual([
        "server 127.0.0.1:3001",
        "server 127.0.0.1:3003"
      ])
      expect(pool("gateway").match(/server 127\.0\.0\.1:\d+/g)).toEqual(["server 127.0.0.1:3001"])
      // a project's streams to one gateway: the project id of the stream's path, hashed
      expect(pool("gateway")).toContain("hash $stream_project consistent;")
      expect(conf).toContain("proxy_buffering off;")
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  })

  it("gives a worker (entities, no gateway) larger V8 semi-spaces, and a process serving streams none", () => {
    const roles = (spec: string) => Either.getOrThrow(parseRoles(spec))
    expect(nodeOptionsFor(roles("entities,singletons,dispatcher"))).toEqual(Option.some(WORKER_NODE_OPTIONS))
    expect(nodeOptionsFor(roles("entities"))).toEqual(Option.some(WORKER_NODE_OPTIONS))
    expect(nodeOptionsFor(allRoles)).toEqual(Option.none())
    expect(nodeOptionsFor(roles("api,webhooks,gateway"))).toEqual(Option.none())
    expect(nodeOptionsFor(roles("api,webhooks"))).toEqual(Option.none())
  })
})
