import { Either, Option } from "effect"
import {
  allRoles,
  formatRoles,
  parseRoles,
  ROLES,
  type Roles,
  rolesProblem,
  type Services
} from "../../runners/Roles.js"

/** One runner process of the deployment: its number (from 1), its ports and its roles. */
export interface Member {
  readonly index: number
  readonly httpPort: number
  readonly runnerPort: number
  readonly roles: Roles
}

export interface PlanInput {
  readonly processes: number
  /** `api,webhooks,gateway;entities,singletons,dispatcher`: role sets, given to the processes in turn; none: all. */
  readonly roles: Option.Option<string>
  /** The one HTTP entry (nginx). */
  readonly entryPort: number
  readonly firstHttpPort: number
  readonly firstRunnerPort: number
  readonly services: Services
}

/**
 * The processes of `npm run cluster`, or why there cannot be such a deployment (one line). Role sets (`;` between
 * them) go to the processes in turn: `--processes 4 --roles "A;B"` is A, B, A, B. Each set must be a possible
 * RUNNER_ROLES for one process (Roles.ts `rolesProblem`), and together they must cover every role: a role no process
 * has is work nobody does (tasks never run without `entities`, nothing is published without `singletons`).
 */
export const plan = (input: PlanInput): Either.Either<ReadonlyArray<Member>, string> => {
  if (!Number.isInteger(input.processes) || input.processes < 1) {
    return Either.left(`--processes: must be a whole number ≥ 1, got ${input.processes}`)
  }
  const specs = Option.match(input.roles, { onNone: () => [formatRoles(allRoles)], onSome: (s) => s.split(";") })
  if (specs.length > input.processes) {
    return Either.left(`--roles: ${specs.length} role sets for ${input.processes} process(es)`)
  }
  const sets: Array<Roles> = []
  for (const spec of specs) {
    const parsed = parseRoles(spec)
    if (Either.isLeft(parsed)) return Either.left(`--roles: ${parsed.left}`)
    const problem = rolesProblem(parsed.right, input.services)
    if (Option.isSome(problem)) return Either.left(`--roles: ${problem.value}`)
    sets.push(parsed.right)
  }
  const members = Array.from({ length: input.processes }, (_, i): Member => ({
    index: i + 1,
    httpPort: input.firstHttpPort + i,
    runnerPort: input.firstRunnerPort + i,
    roles: sets[i % sets.length]!
  }))
  const missing = ROLES.filter((r) => !members.some((m) => m.roles.has(r)))
  if (missing.length > 0) {
    return Either.left(`--roles: no process has ${missing.join(", ")}: every role must run somewhere`)
  }
  const ports = [input.entryPort, ...members.flatMap((m) => [m.httpPort, m.runnerPort])]
  const outOfRange = ports.find((p) => p > 65_535)
  if (outOfRange !== undefined) return Either.left(`port ${outOfRange} is out of range: choose lower first ports`)
  const clash = ports.find((p, i) => ports.indexOf(p) !== i)
  if (clash !== undefined) return Either.left(`port ${clash} is given twice: the entry, HTTP and runner ports overlap`)
  return Either.right(members)
}

/**
 * V8's young generation at 64 MiB semi-spaces (V8's default: 16) for a worker: a process with `entities` and no
 * `gateway`, as README "Production" advises (there: 0.70–0.77 against 0.89–1.21 ms of CPU per transition, alternate
 * runs of `node [--max-semi-space-size=64] scripts/runBuilt.mjs bench/transitions.ts`, stop 40). A process that serves
 * streams keeps the default: the larger young generation showed as RSS per idle stream.
 */
export const WORKER_NODE_OPTIONS = "--max-semi-space-size=64"

/** The NODE_OPTIONS `npm run cluster` gives a member when the operator set none (`WORKER_NODE_OPTIONS`). */
export const nodeOptionsFor = (roles: Roles): Option.Option<string> =>
  roles.has("entities") && !roles.has("gateway") ? Option.some(WORKER_NODE_OPTIONS) : Option.none()
