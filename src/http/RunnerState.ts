import { Effect, Metric, Ref } from "effect"

/**
 * Whether this runner wants new work: `starting` (until everything is built: the probes answer on the raw routes
 * ~10 s before the API's app is attached, measured on a loaded machine), `serving`, `draining` (an operator moves
 * its shards away; it keeps answering HTTP) or `stopping` (SIGTERM: readiness goes first, then the listener, then
 * the shards). `/readyz` answers 503 in every state but `serving`, so a load balancer sends nothing before the
 * runner can serve it, and stops sending before anything closes.
 */
export type ServingState = "starting" | "serving" | "draining" | "stopping"

const STATES: ReadonlyArray<ServingState> = ["starting", "serving", "draining", "stopping"]

/** 1 for the runner's current serving state, 0 for the others (one series per state). */
const stateGauge = Metric.gauge("runner_state", {
  description: "1 for the runner's current serving state (starting, serving, draining, stopping), 0 for the others"
})

const publish = (current: ServingState) =>
  Effect.forEach(STATES, (s) => Metric.set(Metric.tagged(stateGauge, "state", s), s === current ? 1 : 0), {
    discard: true
  })

interface Flags {
  readonly started: boolean
  readonly draining: boolean
  readonly stopping: boolean
}

const stateOf = (f: Flags): ServingState =>
  f.stopping ? "stopping" : !f.started ? "starting" : f.draining ? "draining" : "serving"

export class RunnerState extends Effect.Service<RunnerState>()("RunnerState", {
  effect: Effect.gen(function*() {
    const flags = yield* Ref.make<Flags>({ started: false, draining: false, stopping: false })
    yield* publish("starting")
    const change = (f: (flags: Flags) => Flags, why: string) =>
      Ref.modify(flags, (before) => {
        const after = f(before)
        const [was, now] = [stateOf(before), stateOf(after)]
        return [
          was === now ? Effect.void : Effect.zipRight(publish(now), Effect.logInfo(`runner ${now}: ${why}`)),
          after
        ]
      }).pipe(Effect.flatten)
    return {
      get: Effect.map(Ref.get(flags), stateOf),
      /** Everything is built and listening (main.ts). */
      setStarted: change((f) => ({ ...f, started: true }), "readiness on"),
      /** Drained through the admin API (true) or given its shards back (false): readiness off while draining. */
      setDraining: (draining: boolean) =>
        change(
          (f) => ({ ...f, draining }),
          draining ? "readiness off while its shards move away" : "readiness on again"
        ),
      /** Shutdown has begun: readiness off for good. */
      setStopping: change(
        (f) => ({ ...f, stopping: true }),
        "readiness off; the listener closes next, then the shards are handed over"
      )
    }
  })
}) {}
