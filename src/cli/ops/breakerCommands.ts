import { Args, Command, Options } from "@effect/cli"
import { Console, Effect, Option } from "effect"
import { AdminClient } from "./AdminClient.js"

/**
 * `npm run ops -- breakers`: the provider breakers (per provider and model) and their reset. Each calls one endpoint
 * of the admin API's breakers group (src/http/admin/BreakersApi.ts).
 */

const list = Command.make("breakers", {}, () =>
  Effect.gen(function*() {
    const { breakers, shared } = yield* Effect.flatMap(AdminClient, (c) => c.breakers.list())
    if (!shared) yield* Console.log("Redis did not answer: the answering runner's local breakers only")
    for (const b of breakers) {
      const until = b.until === null ? "" : `until ${b.until.toISOString()}`
      yield* Console.log(
        [
          `${b.provider}/${b.model}`,
          b.state,
          `since ${b.since.toISOString()}`,
          until,
          `${b.faults}/${b.calls} faults`,
          `${b.trips} trips`,
          b.source
        ].join("\t")
      )
    }
    yield* Console.log(`${breakers.length} breakers`)
  }))

const reset = Command.make("reset", {
  provider: Args.text({ name: "provider" }).pipe(Args.withDescription("the provider (runway, luma, …)")),
  model: Args.text({ name: "model" }).pipe(
    Args.withDescription("one model's breaker (* : the credential's); every breaker of the provider without it"),
    Args.optional
  ),
  reason: Options.text("reason").pipe(
    Options.withDescription("why: written into the audit row with your operator name (required)")
  )
}, ({ model, provider, reason }) =>
  Effect.gen(function*() {
    const client = yield* AdminClient
    const r = yield* client.breakers.reset({
      payload: { provider, reason, ...Option.match(model, { onNone: () => ({}), onSome: (m) => ({ model: m }) }) }
    })
    for (const b of r.reset) yield* Console.log(`${b.provider}/${b.model}\t${b.from} → closed`)
    yield* Console.log(`${r.reset.length} reset`)
  })).pipe(
    Command.withDescription(
      "force-close a provider's breakers (or one model's): the window is emptied and calls go again at once"
    )
  )

export const breakerCommands = [
  list.pipe(
    Command.withDescription("the provider breakers: state per provider and model, window, cool-down"),
    Command.withSubcommands([reset])
  )
]
