import { Config, ConfigError, Either, Option } from "effect"
import type * as S from "../config/Settings.js"

/**
 * What a runner process does (RUNNER_ROLES). One process has them all by default (`npm start`); a deployment splits
 * them across processes and machines (README, "Production"):
 * - `api`: the HTTP API, the admin API, the pages (/, /ops, /docs);
 * - `webhooks`: the providers' webhooks (`/webhooks/*`), stored in the inbox;
 * - `gateway`: the browsers' SSE and WebSocket streams;
 * - `entities`: hosts shards, so task entities and their pollers, and drains the inbox into them;
 * - `singletons`: the cluster singletons (outbox relay, sweeper, reconcilers, event retention);
 * - `dispatcher`: RocketMQ → Redis notifications.
 * Every process serves /healthz, /livez, /readyz and /metrics whatever its roles.
 */
export const ROLES = ["api", "webhooks", "gateway", "entities", "singletons", "dispatcher"] as const
export type Role = typeof ROLES[number]
export type Roles = ReadonlySet<Role>

export const allRoles: Roles = new Set(ROLES)

const isRole = (s: string): s is Role => (ROLES as ReadonlyArray<string>).includes(s)

/** As written in RUNNER_ROLES, in the canonical order. */
export const formatRoles = (roles: Roles): string => ROLES.filter((r) => roles.has(r)).join(",")

/** `api, entities` → the set; blank entries are ignored, a repeat counts once. Fails with why (no variable name). */
export const parseRoles = (text: string): Either.Either<Roles, string> => {
  const names = text.split(",").map((s) => s.trim()).filter((s) => s.length > 0)
  if (names.length === 0) return Either.left(`empty: name at least one of ${ROLES.join(", ")}`)
  const unknown = names.find((n) => !isRole(n))
  if (unknown !== undefined) return Either.left(`unknown role "${unknown}" (roles: ${ROLES.join(", ")})`)
  return Either.right(new Set(ROLES.filter((r) => names.includes(r))))
}

/** Which of the shared services a process is configured with (what its roles may rely on). */
export interface Services {
  /** DATABASE_URL: PostgreSQL, shared by every process; else the embedded PGlite, this process's own. */
  readonly database: boolean
  /** REDIS_URL or REDIS_SENTINELS: the notification bus between processes; else the in-process bus. */
  readonly redis: boolean
  /** ROCKETMQ_ENDPOINTS: the event queue between processes; else the in-process queue. */
  readonly rocketmq: boolean
}

/**
 * Why these roles cannot work in one process with these services, if they cannot (one line, no variable name).
 * What is checked is what this process alone can tell: a whole deployment (every role somewhere) is the cluster
 * command's check (src/cli/cluster.ts).
 */
export const rolesProblem = (roles: Roles, services: Services): Option.Option<string> => {
  const has = (r: Role) => roles.has(r)
  const named = formatRoles(roles)
  if (has("singletons") && !has("entities")) {
    return Option.some(
      `${named}: singletons needs entities (a cluster singleton runs on a runner that hosts shards; a process ` +
        "without entities is a cluster client and hosts none)"
    )
  }
  if (!services.database && roles.size < ROLES.length) {
    return Option.some(
      `${named}: without DATABASE_URL the embedded database serves this one process, which must then have every ` +
        "role; set DATABASE_URL (PostgreSQL) to split roles across processes"
    )
  }
  // the in-process bus and queue reach only this process: each side needs the other here, or the shared service
  const pairs: ReadonlyArray<readonly [Role, Role, boolean, string]> = [
    ["gateway", "dispatcher", services.redis, "REDIS_URL (the in-process notification bus"],
    ["singletons", "dispatcher", services.rocketmq, "ROCKETMQ_ENDPOINTS (the in-process event queue"]
  ]
  for (const [a, b, shared, what] of pairs) {
    if (shared || has(a) === has(b)) continue
    const [present, absent] = has(a) ? [a, b] : [b, a]
    return Option.some(`${named}: ${present} without ${absent} needs ${what} joins ${a} and ${b} in one process only)`)
  }
  return Option.none()
}

const description = `what this process does, any of ${ROLES.join(", ")} (README, "Production"); without ` +
  "entities it hosts no shards (a cluster client); every process serves /healthz, /readyz and /metrics"

/** RUNNER_ROLES as a setting of the Runner area (RunnerConfig.ts): parsed at the edge, one line when it is not. */
export const rolesSetting: S.Setting<Roles> = {
  config: Config.string("RUNNER_ROLES").pipe(
    Config.withDefault(ROLES.join(",")),
    Config.mapOrFail((t) => Either.mapLeft(parseRoles(t), (why) => ConfigError.InvalidData(["RUNNER_ROLES"], why))),
    Config.withDescription(description)
  ),
  docs: [{ name: "RUNNER_ROLES", kind: "comma-separated list", default: ROLES.join(","), required: false, description }]
}
