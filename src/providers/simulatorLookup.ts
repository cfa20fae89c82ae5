import { Effect, Option, Schema } from "effect"
import { ProviderCallFailed } from "./errors.js"
import type { Transport } from "./transport.js"

const LookupAnswer = Schema.Struct({ provider_task_id: Schema.String })

/**
 * The provider simulator's lookup by idempotency key (GET /_lookup/{key}), used only where `<NAME>_LOOKUP=true`
 * says the endpoint is the simulator (or a proxy speaking its lookup). None of the real APIs has one: a
 * definition that gains a real lookup declares it in its client, and that one wins.
 */
export const simulatorLookup = (transport: Transport) => (key: string) =>
  transport.call("GET", `/_lookup/${encodeURIComponent(key)}`, Schema.Unknown, { answers: [404] }).pipe(
    Effect.flatMap((r) =>
      r.status === 404 ? Effect.succeedNone : Effect.map(
        Schema.decodeUnknown(LookupAnswer)(r.body),
        (a) => Option.some(a.provider_task_id)
      ).pipe(
        Effect.mapError((e) =>
          new ProviderCallFailed({ kind: "malformed", retryAfter: Option.none(), detail: String(e) })
        )
      )
    )
  )
