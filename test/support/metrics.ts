import { Effect } from "effect"
import type { UnknownException } from "effect/Cause"

/**
 * A metric from a runner's GET /metrics on `port`, summed over its series (0 while it has none). A runner that does
 * not answer is a failure (`until` tries again), not a defect.
 */
export const metricOn = (port: number, name: string): Effect.Effect<number, UnknownException> =>
  Effect.tryPromise(() => fetch(`http://127.0.0.1:${port}/metrics`).then((r) => r.text())).pipe(
    Effect.map((text) =>
      text.split("\n")
        .filter((l) => l.startsWith(`${name} `) || l.startsWith(`${name}{`))
        .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(" ") + 1)), 0)
    )
  )
