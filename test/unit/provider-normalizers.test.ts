import { describe, expect, it } from "@effect/vitest"
import { Either } from "effect"
import * as fc from "fast-check"
import { falOutputUrls, FalStatus, falStatusReport, falWebhooks } from "../../src/providers/fal.js"
import { LumaGeneration, lumaReport, lumaWebhooks } from "../../src/providers/luma.js"
import { OpenAIVideo, openaiVideoReport, openaiWebhooks } from "../../src/providers/openai.js"
import { parseWith, type ProviderReport } from "../../src/providers/ProviderAdapter.js"
import { ReplicatePrediction, replicateReport, replicateWebhooks } from "../../src/providers/replicate.js"
import { runwayReport, RunwayTask } from "../../src/providers/runway.js"
import { VeoOperation, veoReport } from "../../src/providers/veo.js"

// what JSON.parse can hand a normalizer: any JSON value, and the numbers and strings that trip date and list code
const odd = fc.oneof(
  fc.jsonValue(),
  fc.constantFrom(Infinity, -Infinity, 1e300, -1e300, 8.64e15, 0, "", "not a date", [null], [5], {}, { url: 5 })
)

/** A provider message near its documented shape: each field valid, odd, or missing. */
const near = (fields: Record<string, fc.Arbitrary<unknown>>): fc.Arbitrary<unknown> =>
  fc.record(Object.fromEntries(Object.entries(fields).map(([k, v]) => [k, fc.oneof(v, odd)])), { requiredKeys: [] })

const file = near({ url: fc.webUrl(), content_type: fc.constant("video/mp4") })
const str = fc.string()
const seconds = fc.integer({ min: 0, max: 4_000_000_000 })

const messages: ReadonlyArray<
  readonly [string, fc.Arbitrary<unknown>, (u: unknown) => Either.Either<ProviderReport, string>]
> = [
  [
    "OpenAI webhook",
    near({
      id: str,
      type: fc.constantFrom("video.completed", "video.failed"),
      created_at: seconds,
      data: near({ id: str })
    }),
    openaiWebhooks.parse
  ],
  [
    "OpenAI video",
    near({
      id: str,
      status: fc.constantFrom("queued", "in_progress", "completed", "failed"),
      progress: fc.double(),
      error: near({ code: str }),
      completed_at: seconds
    }),
    parseWith(OpenAIVideo, openaiVideoReport)
  ],
  [
    "Replicate prediction (webhook and query)",
    near({
      id: str,
      status: fc.constantFrom("starting", "processing", "succeeded", "failed", "canceled", "aborted"),
      output: fc.oneof(fc.webUrl(), fc.array(fc.webUrl())),
      error: str,
      completed_at: fc.date().map((d) => d.toISOString()),
      created_at: str
    }),
    replicateWebhooks.parse
  ],
  [
    "Replicate query",
    near({ id: str, status: fc.constant("succeeded"), completed_at: str }),
    parseWith(ReplicatePrediction, replicateReport)
  ],
  [
    "fal webhook",
    near({
      request_id: str,
      status: fc.constantFrom("OK", "ERROR"),
      payload: near({ video: file, videos: fc.array(file) }),
      error: str
    }),
    falWebhooks.parse
  ],
  [
    "fal status",
    near({
      status: fc.constantFrom("IN_QUEUE", "IN_PROGRESS", "COMPLETED"),
      request_id: str,
      queue_position: fc.nat()
    }),
    parseWith(FalStatus, (s) => falStatusReport("req", s))
  ],
  [
    "Luma generation (webhook and query)",
    near({
      id: str,
      state: fc.constantFrom("queued", "dreaming", "completed", "failed"),
      failure_reason: str,
      assets: near({ video: fc.webUrl() }),
      created_at: str
    }),
    lumaWebhooks.parse
  ],
  ["Luma query", near({ id: str, state: fc.constant("completed") }), parseWith(LumaGeneration, lumaReport)],
  [
    "Runway task",
    near({
      id: str,
      status: fc.constantFrom("PENDING", "THROTTLED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"),
      progress: fc.double(),
      output: fc.array(fc.webUrl()),
      failureCode: str
    }),
    parseWith(RunwayTask, runwayReport)
  ],
  [
    "Veo operation",
    near({
      name: str,
      done: fc.boolean(),
      error: near({ code: fc.integer(), message: str }),
      response: near({ videos: fc.array(near({ gcsUri: str })) })
    }),
    parseWith(VeoOperation, veoReport)
  ]
]

/** What every consumer of a report relies on: real dates, strings for outputs, a 0–100 integer progress. */
const wellFormed = (r: ProviderReport) => {
  expect(r.providerUpdatedAt === null || Number.isFinite(r.providerUpdatedAt.getTime())).toBe(true)
  expect(r.outputRefs.every((ref) => typeof ref === "string")).toBe(true)
  expect(r.progress === null || (Number.isInteger(r.progress) && r.progress >= 0 && r.progress <= 100)).toBe(true)
  for (const text of [r.providerTaskId, r.clientRequestId, r.errorCode]) {
    expect(text === null || typeof text === "string").toBe(true)
  }
}

describe("every provider normalizer decodes what it reads: an odd field is refused or ignored, never a throw", () => {
  for (const [name, arbitrary, parse] of messages) {
    it.prop(`${name}: a reason or a well-formed report`, [arbitrary], ([message]) => {
      const report = parse(message)
      if (Either.isRight(report)) wellFormed(report.right)
      else expect(typeof report.left).toBe("string")
    }, { fastCheck: { numRuns: 300 } })
  }

  it.prop("fal results: only files' URLs, whatever else the payload holds", [near({
    video: file,
    videos: fc.array(fc.oneof(file, odd))
  })], ([payload]) => {
    expect(falOutputUrls(payload).every((u) => typeof u === "string")).toBe(true)
  }, { fastCheck: { numRuns: 300 } })

  it("fal: the bodies that crashed the gateway", () => {
    expect(falOutputUrls({ videos: 5 })).toEqual([])
    expect(falOutputUrls({ videos: [null] })).toEqual([])
    expect(falOutputUrls({ video: "x", videos: [null, 7, { url: "https://a/v.mp4" }] })).toEqual(["https://a/v.mp4"])
    expect(falOutputUrls({ video: { url: "https://a/w.mp4", file_size: 1 } })).toEqual(["https://a/w.mp4"])
  })

  it("OpenAI and Replicate: times out of Date's range are no time, not an Invalid Date", () => {
    const video = parseWith(OpenAIVideo, openaiVideoReport)({ id: "v", status: "completed", completed_at: 1e300 })
    expect(Either.getOrThrow(video).providerUpdatedAt).toBeNull()
    const prediction = replicateWebhooks.parse({ id: "p", status: "succeeded", completed_at: "not a date" })
    expect(Either.getOrThrow(prediction).providerUpdatedAt).toBeNull()
  })
})
