import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Either, Logger, LogLevel } from "effect"
import { formatRoles, ROLES } from "../../src/runners/Roles.js"
import { RunnerConfig } from "../../src/runners/RunnerConfig.js"
import { checkRoles } from "../../src/runners/startChecks.js"

const DATABASE_URL = "postgres://postgres@127.0.0.1:5432/postgres"
const REDIS_URL = "redis://127.0.0.1:6379"
const ROCKETMQ_ENDPOINTS = "127.0.0.1:8081"
const shared = { DATABASE_URL, REDIS_URL, ROCKETMQ_ENDPOINTS }

/** The line main.ts prints after `config: ` for these settings (nothing when the roles can start), as it reads them. */
const verdict = (settings: Record<string, string>) =>
  checkRoles.pipe(
    Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(settings)))),
    Effect.provide(Logger.minimumLogLevel(LogLevel.None)),
    Effect.either,
    Effect.map(Either.match({ onLeft: (line) => line, onRight: () => "starts" }))
  )

const roles = (settings: Record<string, string>) =>
  RunnerConfig.pipe(
    Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(settings)))),
    Effect.map((c) => formatRoles(c.roles))
  )

/** Every non-empty subset of the roles, as RUNNER_ROLES would name it. */
const subsets = Array.from({ length: 2 ** ROLES.length - 1 }, (_, i) => ROLES.filter((_, b) => ((i + 1) >> b) & 1))

describe("RUNNER_ROLES", () => {
  it.effect("defaults to every role; blanks, spaces and repeats are tolerated", () =>
    Effect.gen(function*() {
      expect(yield* roles({})).toBe(ROLES.join(","))
      expect(yield* roles({ RUNNER_ROLES: " dispatcher, api ,,api" })).toBe("api,dispatcher")
    }))

  it.effect("an empty list or an unknown role is refused with one line naming RUNNER_ROLES", () =>
    Effect.gen(function*() {
      const empty = "RUNNER_ROLES: empty: name at least one of api, webhooks, gateway, entities, singletons, dispatcher"
      expect(yield* verdict({ ...shared, RUNNER_ROLES: "" })).toBe(empty)
      expect(yield* verdict({ ...shared, RUNNER_ROLES: " , " })).toBe(empty)
      expect(yield* verdict({ ...shared, RUNNER_ROLES: "api,relay" })).toBe(
        "RUNNER_ROLES: unknown role \"relay\" (roles: api, webhooks, gateway, entities, singletons, dispatcher)"
      )
      expect(yield* verdict({ ...shared, RUNNER_ROLES: "API" })).toContain("unknown role \"API\"")
    }))

  it.effect("with every shared service, exactly the combinations with singletons but no entities are refused", () =>
    Effect.gen(function*() {
      for (const set of subsets) {
        const line = yield* verdict({ ...shared, RUNNER_ROLES: set.join(",") })
        if (set.includes("singletons") && !set.includes("entities")) {
          expect(line).toBe(
            `RUNNER_ROLES: ${set.join(",")}: singletons needs entities (a cluster singleton runs on a runner that ` +
              "hosts shards; a process without entities is a cluster client and hosts none)"
          )
        } else {
          expect(line, set.join(",")).toBe("starts")
        }
      }
    }))

  it.effect("without DATABASE_URL (the embedded database: one process) only every role starts", () =>
    Effect.gen(function*() {
      const { DATABASE_URL: _, ...noDatabase } = shared
      for (const set of subsets) {
        const line = yield* verdict({ ...noDatabase, RUNNER_ROLES: set.join(",") })
        if (set.length === ROLES.length) expect(line).toBe("starts")
        else if (!set.includes("singletons") || set.includes("entities")) {
          expect(line).toBe(
            `RUNNER_ROLES: ${set.join(",")}: without DATABASE_URL the embedded database serves this one process, ` +
              "which must then have every role; set DATABASE_URL (PostgreSQL) to split roles across processes"
          )
        }
      }
      expect(yield* verdict({})).toBe("starts")
    }))

  it.effect("without REDIS_URL the gateway and the dispatcher must share the process (the bus is in process)", () =>
    Effect.gen(function*() {
      const noRedis = { DATABASE_URL, ROCKETMQ_ENDPOINTS, REDIS_URL: "" }
      expect(yield* verdict({ ...noRedis, RUNNER_ROLES: "api,webhooks,gateway" })).toBe(
        "RUNNER_ROLES: api,webhooks,gateway: gateway without dispatcher needs REDIS_URL (the in-process notification " +
          "bus joins gateway and dispatcher in one process only)"
      )
      expect(yield* verdict({ ...noRedis, RUNNER_ROLES: "entities,singletons,dispatcher" })).toBe(
        "RUNNER_ROLES: entities,singletons,dispatcher: dispatcher without gateway needs REDIS_URL (the in-process " +
          "notification bus joins gateway and dispatcher in one process only)"
      )
      expect(yield* verdict({ ...noRedis, RUNNER_ROLES: "gateway,dispatcher" })).toBe("starts")
      expect(yield* verdict({ ...noRedis, RUNNER_ROLES: "api,webhooks,entities" })).toBe("starts")
    }))

  it.effect("without ROCKETMQ_ENDPOINTS the relay and the dispatcher must share the process (the queue is in process)", () =>
    Effect.gen(function*() {
      const noQueue = { DATABASE_URL, REDIS_URL }
      expect(yield* verdict({ ...noQueue, RUNNER_ROLES: "entities,singletons" })).toBe(
        "RUNNER_ROLES: entities,singletons: singletons without dispatcher needs ROCKETMQ_ENDPOINTS (the in-process " +
          "event queue joins singletons and dispatcher in one process only)"
      )
      expect(yield* verdict({ ...noQueue, RUNNER_ROLES: "gateway,dispatcher" })).toBe(
        "RUNNER_ROLES: gateway,dispatcher: dispatcher without singletons needs ROCKETMQ_ENDPOINTS (the in-process " +
          "event queue joins singletons and dispatcher in one process only)"
      )
      expect(yield* verdict({ ...noQueue, RUNNER_ROLES: "entities,singletons,dispatcher" })).toBe("starts")
      expect(yield* verdict({ ...noQueue, RUNNER_ROLES: "api,webhooks,gateway" })).toBe("starts")
    }))
})
