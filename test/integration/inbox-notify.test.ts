import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { layerHttpTest } from "../../src/testing/TestRunner.js"
import { layerTestDatabase, noDatabase, wakeLoopListening } from "../support/database.js"
import { scaled } from "../support/env.js"
import { layerTestRunner, quietLogs, withSettings } from "../support/runner.js"
import { uuid } from "../support/tasks.js"
import { eventually, openaiEvent, openAISigner, post, submittedTask, taskRow } from "../support/webhooks.js"

const SECRET = "whsec_" + Buffer.from("notify-test-secret-32-bytes-long").toString("base64")
// the sweep is far away: only the NOTIFY sent with the inbox insert can wake the processor in time
const settings = { OPENAI_WEBHOOK_SECRET: SECRET, INBOX_SWEEP_INTERVAL: "10 minutes" }
const sign = openAISigner(SECRET)

const TestLayer = layerHttpTest.pipe(
  Layer.provideMerge(layerTestRunner(layerTestDatabase())),
  Layer.provide(quietLogs),
  Layer.provide(withSettings(settings))
)

describe.skipIf(noDatabase)("inbox low-latency path", () => {
  layer(TestLayer, { timeout: scaled(60_000), excludeTestServices: true })((it) => {
    it.effect("LISTEN/NOTIFY wakes the processor at once: the task changes long before any sweep", () =>
      Effect.gen(function*() {
        // the processor proves its LISTEN before its first drain; from then on only the NOTIFY can wake it in time
        yield* eventually(wakeLoopListening("inbox processor"), (yes) => yes)
        for (let i = 0; i < 3; i++) {
          const videoId = `video_${uuid()}`
          const { taskId } = yield* submittedTask("openai", videoId)
          const body = openaiEvent(videoId)
          const started = Date.now()
          expect((yield* post("/webhooks/openai", body, sign(body))).status).toBe(204)
          yield* eventually(taskRow(taskId), (t) => t.status === "provider_succeeded")
          // the sweep is 10 minutes away: within seconds (scaled for a slow machine) only the NOTIFY can have done it
          expect(Date.now() - started).toBeLessThan(scaled(5_000))
        }
      }))
  })
})
