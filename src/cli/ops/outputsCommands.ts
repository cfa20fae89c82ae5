import { Command, Options } from "@effect/cli"
import { Console, Effect, Option } from "effect"
import type { PendingOutputsView } from "../../http/admin/OutputsApi.js"
import { AdminClient } from "./AdminClient.js"
import { table } from "./clusterCommands.js"

const left = (deadline: Date | null, now: number) =>
  deadline === null ? "-" : `${Math.round((deadline.getTime() - now) / 1000)}s`

export const outputsTable = (v: PendingOutputsView, now = Date.now()): string =>
  v.outputs.length === 0 ? "no output waiting to be stored" : table(
    ["TASK", "STATUS", "DEADLINE IN", "FETCH", "CLAIMS", "LEASE IN", "LAST ERROR"],
    v.outputs.map((o) => [
      o.task_id,
      o.task_status,
      left(o.deadline_at, now),
      o.fetch_status ?? "-",
      String(o.claims),
      left(o.lease_until, now),
      o.last_error ?? ""
    ])
  )

const outputs = Command.make(
  "outputs",
  { limit: Options.integer("limit").pipe(Options.optional, Options.withDescription("at most this many (100)")) },
  ({ limit }) =>
    Effect.gen(function*() {
      const client = yield* AdminClient
      const view = yield* client.outputs.pending({ urlParams: Option.isSome(limit) ? { limit: limit.value } : {} })
      yield* Console.log(outputsTable(view))
    })
).pipe(Command.withDescription(
  "outputs not yet stored and checked (fetching, at risk, probing), the closest to their URL's deadline first"
))

/** The outputs' commands, for src/cli/ops.ts. */
export const outputsCommands = [outputs] as const
