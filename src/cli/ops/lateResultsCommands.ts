import { Command, Options } from "@effect/cli"
import { Console, Effect, Option } from "effect"
import { AdminClient } from "./AdminClient.js"

/**
 * `npm run ops -- late-results [--since ISO] [--provider NAME] [--limit N]`: terminal results of superseded attempts
 * (seed 12.7.3), newest first, for cost reconciliation with the providers' invoices.
 */
export const lateResults = Command.make("late-results", {
  since: Options.text("since").pipe(
    Options.optional,
    Options.withDescription("only results received at or after this ISO 8601 time (e.g. 2026-12-01T00:00:00Z)")
  ),
  provider: Options.text("provider").pipe(Options.optional, Options.withDescription("only this provider's")),
  limit: Options.integer("limit").pipe(Options.withDefault(200), Options.withDescription("rows at most (≤ 1000)"))
}, ({ limit, provider, since }) =>
  Effect.gen(function*() {
    const client = yield* AdminClient
    let sinceDate: Date | undefined
    if (Option.isSome(since)) {
      sinceDate = new Date(since.value)
      if (Number.isNaN(sinceDate.getTime())) {
        return yield* Effect.fail(new Error(`not an ISO 8601 time: ${since.value}`))
      }
    }
    const { rows } = yield* client.lateResults.list({
      urlParams: {
        limit,
        ...(sinceDate === undefined ? {} : { since: sinceDate }),
        ...(Option.isSome(provider) ? { provider: provider.value } : {})
      }
    })
    for (const r of rows) {
      yield* Console.log(
        [
          r.received_at.toISOString(),
          r.provider,
          r.model,
          r.status,
          `task ${r.task_id}`,
          `attempt #${r.attempt_no} ${r.attempt_id}`,
          `job ${r.provider_task_id ?? "-"}`,
          `outputs ${r.output_refs_count}`,
          r.error_class ?? "",
          `trace ${r.trace_id}`
        ].join("\t")
      )
    }
    yield* Console.log(`${rows.length} late results`)
  })).pipe(
    Command.withDescription(
      "terminal results of attempts that were no longer current (never applied; the provider may have billed them)"
    )
  )
