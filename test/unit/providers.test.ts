import { describe, expect, it, layer } from "@effect/vitest"
import { Effect, Either, Layer, Option } from "effect"
import { falAppRoot, falDuration } from "../../src/providers/fal.js"
import { lumaDuration, lumaWebhooks } from "../../src/providers/luma.js"
import { openaiSeconds } from "../../src/providers/openai.js"
import { isTerminalReport, signsBody, unconfirmed } from "../../src/providers/ProviderAdapter.js"
import { ProviderClients } from "../../src/providers/ProviderClients.js"
import type { Resolution } from "../../src/providers/ProviderDefinition.js"
import { providers } from "../../src/providers/providers.js"
import {
  CallbackTokenSettings,
  ProviderSettings,
  ProviderWebhookSettings
} from "../../src/providers/ProviderSettings.js"
import { replicateRoute } from "../../src/providers/replicate.js"
import { runwayDuration } from "../../src/providers/runway.js"
import { veoDuration } from "../../src/providers/veo.js"
import { layerTestProviderClients, Sim } from "../../src/testing/Simulator.js"
import { scaled } from "../support/env.js"
import { freePort, quietLogs } from "../support/runner.js"

const simPort = await Effect.runPromise(freePort)
const sim = `http://127.0.0.1:${simPort}`
// a guard, not a subject: a loaded machine may take seconds for one local request
const TestLayer = layerTestProviderClients(simPort, { PROVIDER_TIMEOUT: `${scaled(10_000)} millis` }).pipe(
  Layer.provide(quietLogs)
)

const right = <A>(e: Either.Either<A, string>) => Either.getOrUndefined(e)

describe("duration_seconds → each provider's allowed values", () => {
  it("OpenAI: 4, 8 or 12 as a string, the shortest not shorter than asked", () => {
    expect([1, 4, 5, 8, 9, 12].map((s) => right(openaiSeconds(s)))).toEqual(["4", "4", "8", "8", "12", "12"])
    expect(Either.isLeft(openaiSeconds(13))).toBe(true)
  })
  it("fal (Kling): \"5\" or \"10\"", () => {
    expect([1, 5, 6, 10].map((s) => right(falDuration(s)))).toEqual(["5", "5", "10", "10"])
    expect(Either.isLeft(falDuration(11))).toBe(true)
  })
  it("Luma (Ray): \"5s\" or \"9s\"", () => {
    expect([4, 5, 6, 9].map((s) => right(lumaDuration(s)))).toEqual(["5s", "5s", "9s", "9s"])
    expect(Either.isLeft(lumaDuration(10))).toBe(true)
  })
  it("Runway: gen4.5 any whole 2–10 s; veo3.1(_fast) 4, 6, 8; image-to-video models refused", () => {
    expect([1, 2, 7, 10].map((s) => right(runwayDuration("gen4.5", s)))).toEqual([2, 2, 7, 10])
    expect(Either.isLeft(runwayDuration("gen4.5", 11))).toBe(true)
    expect([3, 5, 8].map((s) => right(runwayDuration("veo3.1_fast", s)))).toEqual([4, 6, 8])
    expect(Either.isLeft(runwayDuration("gen4_turbo", 5))).toBe(true)
  })
  it("Veo: Veo 2 5–8 s, Veo 3 4, 6, 8 s", () => {
    expect([1, 5, 7].map((s) => right(veoDuration("veo-2.0-generate-001", s)))).toEqual([5, 5, 7])
    expect([1, 5, 7].map((s) => right(veoDuration("veo-3.0-generate-001", s)))).toEqual([4, 6, 8])
    expect(Either.isLeft(veoDuration("veo-3.0-generate-001", 9))).toBe(true)
  })
  it("Replicate: the model's own input (passed through); the model routes to its endpoint", () => {
    expect(right(replicateRoute("kwaivgi/kling-v2.1"))).toEqual({
      path: "/v1/models/kwaivgi/kling-v2.1/predictions",
      version: undefined
    })
    const v = "a".repeat(64)
    expect(right(replicateRoute(`owner/model:${v}`))).toEqual({ path: "/v1/predictions", version: v })
    expect(Either.isLeft(replicateRoute("sim-video"))).toBe(true)
  })
  it("fal: status and cancel name the app by owner/alias", () => {
    expect(falAppRoot("fal-ai/kling-video/v2.1/master/text-to-video")).toBe("fal-ai/kling-video")
  })
})

describe("unsigned callbacks", () => {
  it("only Luma's are unsigned; what they claim of an outcome is applied as running, without output", () => {
    expect(providers.filter((p) => p.webhook !== undefined && !signsBody(p.webhook.protocol.scheme)).map((p) => p.name))
      .toEqual(["luma"])
    const claim = Either.getOrThrow(lumaWebhooks.parse({
      id: "gen-1",
      state: "completed",
      assets: { video: "http://127.0.0.1:6379/internal" }
    }))
    expect(isTerminalReport(claim)).toBe(true)
    expect(unconfirmed(claim)).toEqual({ ...claim, status: "running", stage: null, outputRefs: [] })
    const failed = Either.getOrThrow(lumaWebhooks.parse({ id: "gen-1", state: "failed", failure_reason: "x" }))
    expect(unconfirmed(failed)).toMatchObject({ status: "running", errorClass: null, errorCode: null })
    expect(isTerminalReport(unconfirmed(failed))).toBe(false)
  })
})

describe("provider settings, built from the list", () => {
  it("keep every environment name, each described", () => {
    const docs = [...ProviderSettings.docs, ...ProviderWebhookSettings.docs, ...CallbackTokenSettings.docs]
    const names = docs.map((d) => d.name)
    for (const p of providers) {
      const n = p.name.toUpperCase()
      expect(names).toEqual(
        expect.arrayContaining([`${n}_BASE_URL`, `${n}_API_KEY`, `${n}_LOOKUP`, `${n}_OUTPUT_HOSTS`])
      )
      expect(docs.find((d) => d.name === `${n}_OUTPUT_HOSTS`)?.default).toBe(p.outputHosts.join(","))
      expect(docs.find((d) => d.name === `${n}_BASE_URL`)?.default).toBe(p.defaultBaseUrl)
    }
    expect(names).toEqual(expect.arrayContaining([
      "PUBLIC_BASE_URL",
      "PROVIDER_TIMEOUT",
      "CALLBACK_TOKEN_SECRET",
      "CALLBACK_TOKEN_SECRET_PREVIOUS",
      "WEBHOOK_TOLERANCE_SECONDS",
      "OPENAI_WEBHOOK_SECRET",
      "OPENAI_WEBHOOK_SECRET_PREVIOUS",
      "REPLICATE_WEBHOOK_SECRET",
      "REPLICATE_WEBHOOK_SECRET_PREVIOUS",
      "FAL_JWKS_URL",
      "FAL_USER_ID"
    ]))
    expect(docs.find((d) => d.name === "PROVIDER_TIMEOUT")?.default).toBe("15 seconds")
    expect(docs.filter((d) => d.description.length === 0)).toEqual([])
  })
})

const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  Effect.promise(async () => {
    const key = crypto.randomUUID()
    const isForm = body instanceof FormData
    const res = await fetch(`${sim}${path}`, {
      method: "POST",
      headers: { ...(isForm ? {} : { "content-type": "application/json" }), "idempotency-key": key, ...headers },
      body: isForm ? body : JSON.stringify(body)
    })
    return { status: res.status, body: (await res.json().catch(() => null)) as Record<string, unknown> | null, key }
  })

const form = (fields: Record<string, string>) => {
  const f = new FormData()
  for (const [k, v] of Object.entries(fields)) f.append(k, v)
  return f
}

describe("the simulator refuses what the real APIs refuse", () => {
  layer(TestLayer, { timeout: scaled(120_000), excludeTestServices: true })((it) => {
    it.effect("Runway: our old submit ({model, promptText, duration: 8}, no X-Runway-Version) is refused", () =>
      Effect.gen(function*() {
        const simulator = yield* Sim
        const old = { model: "gen4_turbo", promptText: "a boat", duration: 8 }
        const noHeader = yield* post("/runway/v1/image_to_video", old)
        expect(noHeader.status).toBe(400)
        expect(String(noHeader.body?.error)).toContain("X-Runway-Version")
        // with the header it is still refused: no promptImage, no ratio, and 8 is not 5 or 10
        const v = { "x-runway-version": "2024-11-06" }
        expect((yield* post("/runway/v1/image_to_video", old, v)).status).toBe(400)
        const text = { model: "gen4.5", promptText: "a boat", ratio: "1280:720", duration: 4 }
        expect((yield* post("/runway/v1/text_to_video", text)).status).toBe(400)
        expect((yield* post("/runway/v1/text_to_video", { ...text, duration: 12 }, v)).status).toBe(400)
        expect((yield* post("/runway/v1/text_to_video", { ...text, ratio: "16:9" }, v)).status).toBe(400)
        expect((yield* post("/runway/v1/text_to_video", { ...text, model: "veo3.1_fast", duration: 5 }, v)).status)
          .toBe(400)
        const ok = yield* post("/runway/v1/text_to_video", text, v)
        expect(ok.status).toBe(201)
        expect(simulator.submissions(noHeader.key)).toBe(0)
      }))

    it.effect("OpenAI: seconds must be \"4\" | \"8\" | \"12\", sizes and models are the documented ones", () =>
      Effect.gen(function*() {
        const bad = yield* post("/openai/v1/videos", form({ model: "sora-2", prompt: "x", seconds: "5" }))
        expect(bad.status).toBe(400)
        expect((bad.body?.error as { type?: string } | undefined)?.type).toBe("invalid_request_error")
        expect((yield* post("/openai/v1/videos", form({ model: "sim-video", prompt: "x" }))).status).toBe(400)
        expect((yield* post("/openai/v1/videos", form({ prompt: "x", size: "1920x1080" }))).status).toBe(400)
        expect((yield* post("/openai/v1/videos", { prompt: "x", seconds: 4 })).status).toBe(400)
        expect((yield* post("/openai/v1/videos", form({ model: "sora-2", prompt: "x", size: "1792x1024" }))).status)
          .toBe(400)
        expect((yield* post("/openai/v1/videos", form({ prompt: "x", seconds: "8", size: "1280x720" }))).status)
          .toBe(200)
      }))

    it.effect("Replicate: a version is a 64-hex id, input is required, event filters are start|output|logs|completed", () =>
      Effect.gen(function*() {
        const old = {
          version: "sim-video",
          input: { prompt: "x", duration: 4 },
          webhook: "http://127.0.0.1/webhooks/replicate",
          webhook_events_filter: ["start", "completed"]
        }
        const refused = yield* post("/replicate/v1/predictions", old)
        expect(refused.status).toBe(422)
        expect(refused.body?.detail).toBeTypeOf("string")
        expect((yield* post("/replicate/v1/models/o/m/predictions", { webhook_events_filter: ["start"] })).status)
          .toBe(422)
        expect(
          (yield* post("/replicate/v1/models/o/m/predictions", { input: {}, webhook_events_filter: ["done"] }))
            .status
        ).toBe(422)
        expect((yield* post("/replicate/v1/predictions", { ...old, version: "b".repeat(64) })).status).toBe(201)
      }))

    it.effect("fal (Kling): duration is \"5\" | \"10\", a number is a 422 with FastAPI's detail", () =>
      Effect.gen(function*() {
        const app = "/fal/fal-ai/kling-video/v2.1/master/text-to-video"
        const refused = yield* post(app, { prompt: "x", duration: 4 })
        expect(refused.status).toBe(422)
        expect(Array.isArray(refused.body?.detail)).toBe(true)
        expect((yield* post(app, { prompt: "x", duration: "5", aspect_ratio: "4:3" })).status).toBe(422)
        expect((yield* post(app, { prompt: "x", duration: "10" })).status).toBe(201)
      }))

    it.effect("Luma: a Ray model is required, duration is \"5s\" | \"9s\"", () =>
      Effect.gen(function*() {
        const path = "/luma/dream-machine/v1/generations/video"
        expect((yield* post(path, { prompt: "x", model: "sim-video", callback_url: "http://x" })).status).toBe(400)
        expect((yield* post(path, { prompt: "x", model: "ray-2", duration: "6s" })).status).toBe(400)
        expect((yield* post(path, { prompt: "x", model: "ray-2", duration: 5 })).status).toBe(400)
        expect((yield* post(path, { prompt: "x", model: "ray-2", duration: "9s", resolution: "720p" })).status)
          .toBe(201)
      }))

    it.effect("Veo: the Vertex path and the model's durations; the old path is not an endpoint", () =>
      Effect.gen(function*() {
        const body = { instances: [{ prompt: "x" }], parameters: { durationSeconds: 5 } }
        expect((yield* post("/veo/v1/models/veo-3.0-generate-001/predictLongRunning", body)).status).toBe(404)
        const base = "/veo/v1/projects/p/locations/us-central1/publishers/google/models"
        const bad = yield* post(`${base}/veo-3.0-generate-001:predictLongRunning`, body)
        expect(bad.status).toBe(400)
        expect((bad.body?.error as { status?: string } | undefined)?.status).toBe("INVALID_ARGUMENT")
        expect((yield* post(`${base}/veo-2.0-generate-001:predictLongRunning`, body)).status).toBe(200)
        expect(
          (yield* post(`${base}/veo-2.0-generate-001:predictLongRunning`, {
            ...body,
            parameters: { durationSeconds: 5, resolution: "720p" }
          })).status
        ).toBe(400)
      }))

    it.effect("every definition's body passes the simulator for every duration and resolution it accepts", () =>
      Effect.gen(function*() {
        const simulator = yield* Sim
        yield* simulator.setFaults({ jobDurationMs: 200 })
        const clients = yield* ProviderClients
        const resolutions: ReadonlyArray<Resolution> = ["480p", "720p", "1080p"]
        for (const d of providers) {
          const client = Option.getOrThrow(clients.get(d.name))
          for (let seconds = 1; seconds <= 13; seconds++) {
            const allowed = Either.isRight(d.check({ model: d.exampleModel, durationSeconds: seconds }))
            for (const resolution of resolutions) {
              const key = crypto.randomUUID()
              const result = yield* Effect.either(client.submit({
                attemptId: crypto.randomUUID(),
                clientRequestId: key,
                model: d.exampleModel,
                prompt: "a lighthouse",
                durationSeconds: seconds,
                resolution
              }))
              expect([d.name, seconds, resolution, Either.isRight(result)]).toEqual([
                d.name,
                seconds,
                resolution,
                allowed
              ])
              // refused before sending: the provider never saw it
              if (!allowed) {
                expect(Either.isLeft(result) && result.left._tag === "SubmitRejected" && result.left.code)
                  .toBe("unsupported_request")
                expect(simulator.submissions(key)).toBe(0)
              }
            }
          }
          // a model the provider does not offer is refused before sending too
          expect(Either.isLeft(d.check({ model: "sim-video", durationSeconds: 4 }))).toBe(true)
        }
      }))
  })
})
