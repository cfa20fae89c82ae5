import { describe, expect, layer } from "@effect/vitest"
import { Duration, Effect, Layer, Option, Schedule } from "effect"
import { ProviderClients } from "../../src/providers/ProviderClients.js"
import { definitionOf } from "../../src/providers/providers.js"
import { layerTestProviderClients, Sim } from "../../src/testing/Simulator.js"
import { scaled, scaledDuration } from "../support/env.js"
import { freePort, quietLogs } from "../support/runner.js"

const simPort = await Effect.runPromise(freePort)
const PROVIDERS = ["openai", "replicate", "fal", "runway", "luma", "veo"] as const

// a guard (the simulator's accept-then-timeout hangs for minutes): generous, so a loaded machine never trips it
const TestLayer = layerTestProviderClients(simPort, { PROVIDER_TIMEOUT: `${scaled(3_000)} millis` }).pipe(
  Layer.provide(quietLogs)
)

/** Queries the job until the simulator reports it no longer queued or running (the deadline scales). */
const finished = <A extends { readonly status: string }>(
  client: { readonly query: (id: string, model: string) => Effect.Effect<A, unknown> },
  providerTaskId: string,
  model: string
) =>
  client.query(providerTaskId, model).pipe(
    Effect.filterOrFail((r) => r.status !== "queued" && r.status !== "running", () => "still in progress"),
    Effect.retry(Schedule.spaced(Duration.millis(50)).pipe(Schedule.upTo(scaledDuration(Duration.seconds(10))))),
    Effect.orDie
  )

const modelOf = (provider: string) => definitionOf(provider)!.exampleModel

const submitOne = (provider: string, key = crypto.randomUUID()) =>
  Effect.gen(function*() {
    const client = Option.getOrThrow((yield* ProviderClients).get(provider))
    const { providerTaskId } = yield* client.submit({
      attemptId: crypto.randomUUID(),
      clientRequestId: key,
      model: modelOf(provider),
      prompt: "a test",
      durationSeconds: 4,
      resolution: "720p"
    })
    return { client, providerTaskId, key }
  })

describe("provider clients against the simulator", () => {
  layer(TestLayer, { timeout: scaled(60_000), excludeTestServices: true })((it) => {
    it.effect("every provider's query API walks queued → running → its outcome, normalized", () =>
      Effect.gen(function*() {
        const simulator = yield* Sim
        yield* simulator.setFaults({
          jobDurationMs: 600,
          queuedShare: 0.3,
          outcomes: { succeeded: 1, failed: 0, canceled: 0 }
        })
        for (const provider of PROVIDERS) {
          const { client, providerTaskId } = yield* submitOne(provider)
          // polled until it ends (how many polls see each state depends on the machine's speed): the walk only
          // ever moves forward, and ends succeeded
          const order = ["queued", "running", "succeeded"]
          const seen: Array<string> = []
          const last = yield* client.query(providerTaskId, modelOf(provider)).pipe(
            Effect.tap((r) => Effect.sync(() => seen.push(r.status))),
            Effect.filterOrFail((r) => r.status !== "queued" && r.status !== "running", () => "still going"),
            Effect.retry(Schedule.spaced(Duration.millis(100))),
            Effect.timeout(scaledDuration(Duration.seconds(20)))
          )
          expect([provider, last.status]).toEqual([provider, "succeeded"])
          expect(seen.map((st) => order.indexOf(st))).toEqual([...seen.map((st) => order.indexOf(st))].sort())
          expect(last.providerTaskId).toBe(providerTaskId)
        }
      }))

    it.effect("failures and cancels are reported as such", () =>
      Effect.gen(function*() {
        const simulator = yield* Sim
        yield* simulator.setFaults({ jobDurationMs: 300, outcomes: { succeeded: 0, failed: 1, canceled: 0 } })
        const { client, providerTaskId } = yield* submitOne("replicate")
        expect((yield* finished(client, providerTaskId, modelOf("replicate"))).status).toBe("failed")
        yield* simulator.setFaults({ jobDurationMs: 5000, outcomes: { succeeded: 1, failed: 0, canceled: 0 } })
        const running = yield* submitOne("runway")
        yield* running.client.cancel(running.providerTaskId, modelOf("runway"))
        expect((yield* running.client.query(running.providerTaskId, modelOf("runway"))).status).toBe("canceled")
      }))

    it.effect("429 carries Retry-After, 5xx is a server error; neither is ever a resubmission", () =>
      Effect.gen(function*() {
        const simulator = yield* Sim
        yield* simulator.setFaults({ jobDurationMs: 5000, rate429: 0, rate5xx: 0 })
        const { client, key, providerTaskId } = yield* submitOne("openai")
        yield* simulator.setFaults({ rate429: 1, retryAfterSeconds: 7 })
        const throttled = yield* Effect.flip(client.query(providerTaskId, modelOf("openai")))
        expect(throttled.kind).toBe("rate_limited")
        expect(Option.map(throttled.retryAfter, Duration.toSeconds)).toEqual(Option.some(7))
        yield* simulator.setFaults({ rate429: 0, rate5xx: 1 })
        expect((yield* Effect.flip(client.query(providerTaskId, modelOf("openai")))).kind).toBe("server")
        yield* simulator.setFaults({ rate5xx: 0 })
        expect(simulator.submissions(key)).toBe(1)
      }))

    it.effect("accepted-then-timeout is SUBMIT_UNKNOWN, and the simulator counts the job it did create", () =>
      Effect.gen(function*() {
        const simulator = yield* Sim
        yield* simulator.setFaults({ submitAcceptThenTimeout: 1 })
        const key = crypto.randomUUID()
        const failure = yield* Effect.flip(submitOne("luma", key))
        yield* simulator.setFaults({ submitAcceptThenTimeout: 0 })
        expect(failure._tag).toBe("SubmitUnknown")
        expect(simulator.submissions(key)).toBe(1)
      }))
  })
})
