import { Schema } from "effect"
import { SYSTEM_MODES } from "./systemModeNames.js"

/** The system modes, decoded wherever one arrives (the admin API, the mode row). */
export const SystemMode = Schema.Literal(...SYSTEM_MODES)
export type SystemMode = typeof SystemMode.Type

/** What a mode may let run. `"others"`: on, except for the providers listed as degraded beside the mode. */
export type Gate = boolean | "others"

export interface ModeGates {
  /** new tasks and projects (POST /v1/...): refused with 503 naming the mode */
  readonly admission: Gate
  /** sending queued tasks to their provider (the one call that costs money) */
  readonly submission: Gate
  /** provider queries and the rest of a submitted task's lifecycle (output fetch, media check) */
  readonly polling: Gate
  /** provider callbacks stored in the inbox (applied once writes run) */
  readonly webhookIntake: Gate
  /** pushes to browsers (dispatcher → bus → SSE/WebSocket); off: clients poll snapshots */
  readonly liveNotifications: Gate
  /** task writes (commit_task_change refuses the others in the database itself) */
  readonly writes: Gate
  /** reading tasks and projects */
  readonly reads: Gate
}

/**
 * Seed 19.10.2, as data (the README's modes table says the same):
 * - DEGRADED_NOTIFY: "turn off non-critical live experience" — pushes stop; every fact is still written, and a
 *   client reads it by snapshot (and by cursor replay once pushes resume).
 * - DEGRADED_PROVIDER: "restrict the unhealthy provider, without touching other routes" (19.10.1: break the circuit,
 *   assign it no new work; submitted tasks keep being reconciled) — submissions to the listed providers wait,
 *   their tasks are still admitted (queued) and polled.
 * - QUEUE_ONLY: "only create tasks that can be durably persisted, do not call the provider now".
 * - RECONCILE_ONLY: "stop every new cost; only accepted tasks, callbacks, output fetches and billing".
 * - READ_ONLY: "only viewing existing projects and assets" — callbacks are still stored (a fact a provider will not
 *   send twice is kept) and applied after the window; no query is sent whose answer could not be written.
 * - MAINTENANCE: "the source of truth cannot be read safely either: stop the service explicitly" — every path
 *   answers 503 except health, metrics and the admin API (the way back out).
 */
export const modeGates: { readonly [M in SystemMode]: ModeGates } = {
  NORMAL: {
    admission: true,
    submission: true,
    polling: true,
    webhookIntake: true,
    liveNotifications: true,
    writes: true,
    reads: true
  },
  DEGRADED_NOTIFY: {
    admission: true,
    submission: true,
    polling: true,
    webhookIntake: true,
    liveNotifications: false,
    writes: true,
    reads: true
  },
  DEGRADED_PROVIDER: {
    admission: true,
    submission: "others",
    polling: true,
    webhookIntake: true,
    liveNotifications: true,
    writes: true,
    reads: true
  },
  QUEUE_ONLY: {
    admission: true,
    submission: false,
    polling: true,
    webhookIntake: true,
    liveNotifications: true,
    writes: true,
    reads: true
  },
  RECONCILE_ONLY: {
    admission: false,
    submission: false,
    polling: true,
    webhookIntake: true,
    liveNotifications: true,
    writes: true,
    reads: true
  },
  READ_ONLY: {
    admission: false,
    submission: false,
    polling: false,
    webhookIntake: true,
    liveNotifications: true,
    writes: false,
    reads: true
  },
  MAINTENANCE: {
    admission: false,
    submission: false,
    polling: false,
    webhookIntake: false,
    liveNotifications: false,
    writes: false,
    reads: false
  }
}

/** Whether `mode` lets `gate` run, for `provider` where the gate is per provider. */
export const allows = (
  mode: SystemMode,
  gate: keyof ModeGates,
  degradedProviders: ReadonlyArray<string> = [],
  provider?: string
): boolean => {
  const g = modeGates[mode][gate]
  return g === "others" ? provider === undefined || !degradedProviders.includes(provider) : g
}

/** The modes whose gate is off, for SQL (commit_task_change refuses task writes in these). */
export const modesWithout = (gate: keyof ModeGates): ReadonlyArray<SystemMode> =>
  SystemMode.literals.filter((m) => modeGates[m][gate] === false)

/** The README's table, from the data above (scripts/docs-config.ts keeps the README's copy equal to it). */
export const modesTable = (): string => {
  const columns: ReadonlyArray<readonly [keyof ModeGates, string]> = [
    ["admission", "admission"],
    ["submission", "submission"],
    ["polling", "polling"],
    ["webhookIntake", "webhook intake"],
    ["liveNotifications", "live notifications"],
    ["writes", "writes"],
    ["reads", "reads"]
  ]
  const cell = (g: Gate) => (g === "others" ? "other providers" : g ? "yes" : "—")
  return [
    `| Mode | ${columns.map(([, title]) => title).join(" | ")} |`,
    `|---|${columns.map(() => "---").join("|")}|`,
    ...SystemMode.literals.map((m) => `| \`${m}\` | ${columns.map(([k]) => cell(modeGates[m][k])).join(" | ")} |`)
  ].join("\n")
}
