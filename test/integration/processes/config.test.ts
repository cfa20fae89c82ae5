import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Either } from "effect"
import * as net from "node:net"
import * as S from "../../../src/config/Settings.js"
import { allAreas } from "../../../src/runners/settings.js"
import { scaled } from "../../support/env.js"
import { allocatePort } from "../../support/ports.js"
import { spawnRunner, withTimeout } from "../../support/processes.js"

/**
 * A stand-in PostgreSQL that only counts who connects: DATABASE_URL points at it, so a runner that got as far as
 * database work would show up here (and a runner that skipped validation would fail later, with other output).
 */
const databaseTrap = async () => {
  const port = await allocatePort()
  let connections = 0
  const server = net.createServer((socket) => {
    connections++
    socket.destroy()
  })
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve))
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    connections: () => connections,
    close: () => new Promise<void>((resolve) => server.close(() => resolve()))
  }
}

/** `npm start` with the given settings over a clean environment; its exit code and output. */
const start = async (settings: Record<string, string>) => {
  const trap = await databaseTrap()
  // spawnRunner starts from a clean environment: only these settings (and PATH, HOME …) reach the runner
  const runner = spawnRunner({ DATABASE_URL: trap.url, ...settings })
  try {
    const code = await withTimeout(runner.exited, scaled(60_000), "runner exit on invalid config")
    return { code, lines: runner.output().trimEnd().split("\n"), connections: trap.connections() }
  } finally {
    runner.child.kill("SIGKILL")
    await trap.close()
  }
}

describe("settings are validated before the runner starts", () => {
  it("an invalid HTTP_PORT: exit 1, one line naming it, no database connection", async () => {
    const { code, connections, lines } = await start({ HTTP_PORT: "abc" })
    expect(lines).toEqual([`config: HTTP_PORT: Expected a network port value but received "abc"`])
    expect(code).toBe(1)
    expect(connections).toBe(0)
  })

  it("a short AUTH_SECRET: the line names AUTH_SECRET (its check used to lose the name)", async () => {
    const { code, connections, lines } = await start({ AUTH_SECRET: "too-short" })
    expect(lines).toEqual(["config: AUTH_SECRET: must be at least 32 characters"])
    expect(code).toBe(1)
    expect(connections).toBe(0)
  })

  it("impossible RUNNER_ROLES: exit 1, one line naming it, no database connection", async () => {
    const { code, connections, lines } = await start({ RUNNER_ROLES: "api,singletons" })
    expect(lines).toEqual([
      "config: RUNNER_ROLES: api,singletons: singletons needs entities (a cluster singleton runs on a runner that " +
      "hosts shards; a process without entities is a cluster client and hosts none)"
    ])
    expect(code).toBe(1)
    expect(connections).toBe(0)
  })

  it("several invalid values are named on the same one line", async () => {
    const { code, connections, lines } = await start({ QUOTA_LOCAL_SHARE: "2", SWEEP_BATCH: "0", LOG_LEVEL: "loud" })
    expect(lines).toHaveLength(1)
    expect(lines[0]).toMatch(/^config: /)
    expect(lines[0]).toContain("QUOTA_LOCAL_SHARE: must be at most 1")
    expect(lines[0]).toContain("SWEEP_BATCH: must be an integer ≥ 1")
    expect(lines[0]).toContain(`LOG_LEVEL: Expected a log level but received "loud"`)
    expect(code).toBe(1)
    expect(connections).toBe(0)
  })
})

describe("the settings areas", () => {
  it("declare each variable once, with a description", () => {
    const docs = allAreas.flatMap((a) => a.docs)
    const names = docs.map((d) => d.name)
    expect(names.filter((n, i) => names.indexOf(n) !== i)).toEqual([])
    expect(docs.filter((d) => d.description.trim().length === 0)).toEqual([])
  })

  it.effect("all read with their defaults from an empty environment", () =>
    Effect.gen(function*() {
      const result = yield* Effect.either(S.validateAll(allAreas))
      expect(Either.isRight(result)).toBe(true)
    }).pipe(Effect.withConfigProvider(ConfigProvider.fromMap(new Map()))))
})
