import { Args, Command, Options } from "@effect/cli"
import { Console, Effect, Option, Schema } from "effect"
import { SystemMode } from "../../domain/systemModes.js"
import type { ModeView } from "../../http/admin/OperationsApi.js"
import { TaskId } from "../../schema/ids.js"
import { AdminClient } from "./AdminClient.js"

/**
 * The operations commands of `npm run ops` (issue #13): modes and the write epoch, the inbox and the dead letters,
 * manual review and reconciliations. Each calls one endpoint of the admin API's operations group.
 */

const reason = Options.text("reason").pipe(
  Options.withDescription("why: written into the audit row with your operator name (required)")
)

const printMode = (v: ModeView) =>
  Console.log(
    [
      `mode ${v.mode}${v.degraded_providers.length > 0 ? ` (${v.degraded_providers.join(", ")})` : ""}`,
      `active region ${v.active_region}, write epoch ${v.write_epoch}`,
      `since ${v.updated_at.toISOString()}`
    ].join("\n")
  )

const modeGet = Command.make(
  "get",
  {},
  () => Effect.flatMap(AdminClient, (c) => c.operations.getMode()).pipe(Effect.flatMap(printMode))
).pipe(
  Command.withDescription("the system mode, the active region and the write epoch")
)

const modeSet = Command.make("set", {
  mode: Args.choice(SystemMode.literals.map((m) => [m, m] as [string, SystemMode]), { name: "MODE" }).pipe(
    Args.withDescription(SystemMode.literals.join(" | "))
  ),
  reason,
  providers: Options.text("provider").pipe(
    Options.repeated,
    Options.withDescription("DEGRADED_PROVIDER: a provider whose submissions pause (repeat for several)")
  )
}, ({ mode, providers, reason }) =>
  Effect.flatMap(AdminClient, (c) =>
    c.operations.setMode({
      payload: { mode, reason, ...(providers.length > 0 ? { providers } : {}) }
    })).pipe(Effect.flatMap(printMode))).pipe(
    Command.withDescription("switch the system mode (seed 19.5.5; what each gates: README, Modes, epoch, queues)")
  )

const epochBump = Command.make(
  "bump",
  {
    region: Options.text("region").pipe(Options.withDescription("the region that writes from now on")),
    reason
  },
  ({ reason, region }) =>
    Effect.flatMap(AdminClient, (c) => c.operations.bumpEpoch({ payload: { region, reason } })).pipe(
      Effect.flatMap(printMode)
    )
).pipe(
  Command.withDescription(
    "raise the write epoch and make REGION the active one: its runners adopt the new epoch within a second, " +
      "every other writer is fenced"
  )
)

const printInbox = (
  rows: ReadonlyArray<{ id: number; provider: string; received_at: Date; attempts: number; error: string | null }>
) =>
  Effect.gen(function*() {
    for (const r of rows) {
      yield* Console.log(
        `${r.id}\t${r.provider}\t${r.received_at.toISOString()}\t${r.attempts} tries\t${r.error ?? ""}`
      )
    }
    yield* Console.log(`${rows.length} rows`)
  })

const inboxDead = Command.make(
  "list",
  {},
  () => Effect.flatMap(AdminClient, (c) => c.operations.inboxDead()).pipe(Effect.flatMap((v) => printInbox(v.rows)))
).pipe(
  Command.withDescription("callbacks given up on (unreadable, retries exhausted, unknown task)")
)
const inboxOrphans = Command.make(
  "list",
  {},
  () => Effect.flatMap(AdminClient, (c) => c.operations.inboxOrphans()).pipe(Effect.flatMap((v) => printInbox(v.rows)))
).pipe(
  Command.withDescription("callbacks no attempt knows yet (flagged orphans; they are never dropped)")
)
const inboxReplay = Command.make("replay", {
  id: Args.text({ name: "id|all" }),
  orphans: Options.boolean("orphans").pipe(Options.withDescription("replay orphans instead of dead rows"))
}, ({ id, orphans }) =>
  Effect.gen(function*() {
    const client = yield* AdminClient
    if (id !== "all" && !/^[0-9]{1,18}$/.test(id)) return yield* Effect.fail(new Error(`not a row id: ${id}`))
    const r = yield* client.operations.inboxReplay({ payload: { id, which: orphans ? "orphans" : "dead" } })
    yield* Console.log(`${r.replayed} replayed`)
  })).pipe(Command.withDescription("make dead (or, with --orphans, orphan) inbox rows due again, tries reset"))

const inbox = Command.make("inbox").pipe(
  Command.withDescription("the provider callback inbox"),
  Command.withSubcommands([
    Command.make("dead").pipe(Command.withDescription("dead inbox rows"), Command.withSubcommands([inboxDead])),
    Command.make("orphans").pipe(Command.withDescription("orphan inbox rows"), Command.withSubcommands([inboxOrphans])),
    inboxReplay
  ])
)

const deadLettersList = Command.make("list", {}, () =>
  Effect.gen(function*() {
    const { rows } = yield* Effect.flatMap(AdminClient, (c) => c.operations.deadLetters())
    for (const r of rows) {
      yield* Console.log(`${r.id}\t${r.event_id}\ttask ${r.task_id}\t${r.attempts} tries\t${r.error}`)
    }
    yield* Console.log(`${rows.length} open dead letters`)
  })).pipe(Command.withDescription("notifications the dispatcher gave up on"))

const deadLettersReplay = Command.make(
  "replay",
  { id: Args.text({ name: "id|all" }) },
  ({ id }) =>
    Effect.gen(function*() {
      const client = yield* AdminClient
      if (id !== "all" && !/^[1-9][0-9]{0,14}$/.test(id)) return yield* Effect.fail(new Error(`not an id: ${id}`))
      const r = yield* client.operations.deadLettersReplay({ payload: { id: id === "all" ? "all" : Number(id) } })
      yield* Console.log(`${r.replayed} replayed`)
    })
).pipe(Command.withDescription("publish dead-lettered notifications again (browsers ignore versions they have)"))

const deadLetters = Command.make("dead-letters").pipe(
  Command.withDescription("notification dead letters"),
  Command.withSubcommands([deadLettersList, deadLettersReplay])
)

const reviewList = Command.make("list", {
  cursor: Options.text("cursor").pipe(Options.optional, Options.withDescription("next_cursor of the previous page")),
  limit: Options.integer("limit").pipe(Options.withDefault(100), Options.withDescription("tasks per page (≤ 500)"))
}, ({ cursor, limit }) =>
  Effect.gen(function*() {
    const client = yield* AdminClient
    const page = yield* client.operations.review({
      urlParams: { limit, ...(Option.isSome(cursor) ? { cursor: cursor.value } : {}) }
    })
    for (const t of page.tasks) {
      yield* Console.log(`${t.task_id}\t${t.provider ?? "-"}\t${t.reason}\tsince ${t.since.toISOString()}`)
    }
    yield* Console.log(
      page.next_cursor === null ? `${page.tasks.length} tasks` : `more: --cursor ${page.next_cursor}`
    )
  })).pipe(Command.withDescription("tasks waiting in manual_review, oldest first"))

const reviewResolve = Command.make("resolve", {
  task: Args.text({ name: "task" }),
  as: Options.choice("as", ["ready", "failed", "canceled"]).pipe(
    Options.withDescription(
      "ready: fetch and check the provider's output, then ready (settled); failed, canceled: refunded"
    )
  ),
  reason
}, ({ as, reason, task }) =>
  Effect.gen(function*() {
    const client = yield* AdminClient
    const taskId = yield* Schema.decodeUnknown(TaskId)(task).pipe(
      Effect.mapError(() => new Error(`not a task id: ${task}`))
    )
    const r = yield* client.operations.resolveReview({ path: { task: taskId }, payload: { as, reason } })
    yield* Console.log(`${r.task_id}: ${r.status} (version ${r.version})`)
  })).pipe(Command.withDescription("decide a task in manual_review, through its entity (events, ledger, slot)"))

const review = Command.make("review").pipe(
  Command.withDescription("manual review"),
  Command.withSubcommands([reviewList, reviewResolve])
)

const reconciliationsList = Command.make("list", {}, () =>
  Effect.gen(function*() {
    const { rows } = yield* Effect.flatMap(AdminClient, (c) => c.operations.reconciliations())
    for (const r of rows) {
      yield* Console.log(`${r.id}\ttask ${r.task_id}\t${r.reason}\t${r.created_at.toISOString()}`)
    }
    yield* Console.log(`${rows.length} open`)
  })).pipe(Command.withDescription("open reconciliations: contradictory terminals, overdue tasks"))

const reconciliationsResolve = Command.make(
  "resolve",
  { id: Args.integer({ name: "id" }), reason },
  ({ id, reason }) =>
    Effect.flatMap(AdminClient, (c) => c.operations.resolveReconciliation({ path: { id }, payload: { reason } })).pipe(
      Effect.zipRight(Console.log(`reconciliation ${id} resolved`))
    )
).pipe(Command.withDescription("mark an open reconciliation resolved"))

const reconciliations = Command.make("reconciliations").pipe(
  Command.withDescription("task reconciliations"),
  Command.withSubcommands([reconciliationsList, reconciliationsResolve])
)

const mode = Command.make("mode").pipe(
  Command.withDescription("the system mode"),
  Command.withSubcommands([modeGet, modeSet])
)
const epoch = Command.make("epoch").pipe(
  Command.withDescription("the write epoch"),
  Command.withSubcommands([epochBump])
)

export const operationsCommands = [mode, epoch, inbox, deadLetters, review, reconciliations] as const
