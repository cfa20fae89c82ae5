import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Layer } from "effect"
import { generateKeyPairSync } from "node:crypto"
import { CallbackInbox, type InboxEntry } from "../../src/intake/CallbackInbox.js"
import { callbackToken } from "../../src/providers/signatures.js"
import { taskTestClient } from "../../src/testing/TaskTestClient.js"
import { layerHttpTest } from "../../src/testing/TestRunner.js"
import { layerTestDatabase, lockWaiters, noDatabase } from "../support/database.js"
import { scaled } from "../support/env.js"
import { layerTestRunner, quietLogs, withSettings } from "../support/runner.js"
import { admitTask, uuid } from "../support/tasks.js"
import {
  eventually,
  falHeaders,
  nowSeconds,
  OPENAI_TEST_SECRET,
  openaiEvent,
  openAISigner,
  post,
  serveFalJwks,
  submittedTask,
  taskRow
} from "../support/webhooks.js"

const TOKEN_SECRET = "callback-token-secret"
const fal = generateKeyPairSync("ed25519")

const TestLayer = layerHttpTest.pipe(
  Layer.provideMerge(layerTestRunner(layerTestDatabase())),
  Layer.provide(quietLogs),
  Layer.provide(withSettings({
    OPENAI_WEBHOOK_SECRET: OPENAI_TEST_SECRET,
    CALLBACK_TOKEN_SECRET: TOKEN_SECRET,
    CALLBACK_TOKEN_TTL: "1 hour",
    FAL_USER_ID: "user-1",
    FAL_JWKS_URL: await serveFalJwks(fal.publicKey),
    // one writer: concurrent callbacks share its batches, as they do under load
    INBOX_WRITE_PARALLELISM: "1",
    INBOX_SWEEP_INTERVAL: "200 millis"
  }))
)

const signOpenAI = openAISigner(OPENAI_TEST_SECRET)

/** A fal webhook for `requestId`, signed by "fal". */
const falWebhook = (requestId: string, body: string) =>
  post("/webhooks/fal", body, falHeaders(fal.privateKey, requestId, body))

const inboxRow = (where: { readonly providerTaskId?: string; readonly attemptId?: string }) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{ process_status: string; last_error_code: string | null; provider_task_id: string | null }>`
      SELECT process_status, last_error_code, provider_task_id FROM provider_callback_inbox
      WHERE ${
        where.attemptId !== undefined
          ? sql`attempt_id = ${where.attemptId}`
          : sql`provider_task_id = ${where.providerTaskId!}`
      }`
  ).pipe(Effect.orDie)

const lumaUrl = (attemptId: string, issued: number, token?: string) =>
  `/webhooks/luma?attempt=${attemptId}&issued=${issued}&token=${
    token ?? callbackToken(TOKEN_SECRET, "luma", attemptId, issued)
  }`

describe.skipIf(noDatabase)("hostile webhook bodies fail alone, and every signed callback is answered", () => {
  layer(TestLayer, { timeout: scaled(120_000), excludeTestServices: true })((it) => {
    it.effect("a webhook nested 4,500 deep is 400; the 40 webhooks sent with it are 204 and stored", () =>
      Effect.gen(function*() {
        const deep = JSON.stringify({
          id: `evt_${uuid()}`,
          object: "event",
          created_at: nowSeconds(),
          type: "video.completed",
          data: { id: `video_${uuid()}` }
        }).replace(/}$/, `,"x":${"[".repeat(4500)}${"]".repeat(4500)}}`)
        expect(deep.length).toBeLessThan(256 * 1024)
        const goods = Array.from({ length: 40 }, () => openaiEvent(`video_${uuid()}`))
        const results = yield* Effect.forEach(
          [deep, ...goods],
          (body) => post("/webhooks/openai", body, signOpenAI(body)),
          { concurrency: "unbounded" }
        )
        expect(results.map((r) => r.status)).toEqual([400, ...goods.map(() => 204)])
        expect(results[0]!.text).toContain("nested")
        const sql = yield* SqlClient.SqlClient
        const [stored] = yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM provider_callback_inbox
          WHERE provider_task_id IN ${sql.in(goods.map((g) => JSON.parse(g).data.id as string))}`
        expect(stored!.n).toBe(40)
      }))

    it.effect("a row whose write throws (not an SQL error) fails alone; its batch-mates are stored", () =>
      Effect.gen(function*() {
        const inbox = yield* CallbackInbox
        const entry = (i: number): InboxEntry => ({
          provider: "openai",
          dedupKey: `batch-${uuid()}`,
          providerEventId: null,
          providerTaskId: `video_${i}_${uuid()}`,
          clientRequestId: null,
          attemptId: null,
          providerOccurredAt: null,
          signatureKeyVersion: "current",
          payloadHash: "00",
          body: "{}",
          traceId: "test"
        })
        // a value whose serialisation throws, as a stack overflow in JSON.stringify did
        const poison = {
          ...entry(-1),
          providerOccurredAt: {
            toJSON: () => {
              throw new RangeError("Maximum call stack size exceeded")
            }
          } as unknown as Date
        }
        const entries = [poison, ...Array.from({ length: 20 }, (_, i) => entry(i))]
        // hold the one writer on a row lock, queue the 21 behind it, then let go: they are written as one batch
        const sql = yield* SqlClient.SqlClient
        const blocking = entry(-2)
        const release = yield* Deferred.make<void>()
        const holding = yield* Deferred.make<void>()
        yield* sql.withTransaction(Effect.gen(function*() {
          yield* sql`INSERT INTO provider_callback_inbox (provider, dedup_key, payload_hash)
                     VALUES ('openai', ${blocking.dedupKey}, '\\x00')`
          yield* Deferred.succeed(holding, undefined)
          yield* Deferred.await(release)
        })).pipe(Effect.orDie, Effect.fork)
        yield* Deferred.await(holding)
        const blocked = yield* Effect.fork(inbox.store(blocking))
        yield* eventually(lockWaiters, (n) => n >= 1)
        const fibers = yield* Effect.forEach(entries, (e) => Effect.fork(Effect.exit(inbox.store(e))))
        // each store offers its entry, then suspends awaiting its result
        yield* eventually(
          Effect.forEach(fibers, Fiber.status),
          (statuses) => statuses.every((s) => s._tag === "Suspended")
        )
        yield* Deferred.succeed(release, undefined)
        expect(yield* Fiber.join(blocked)).toBe("duplicate")
        const exits = yield* Effect.forEach(fibers, Fiber.join)
        expect(Exit.isFailure(exits[0]!)).toBe(true)
        expect(exits.slice(1).map((e) => Exit.isSuccess(e) ? e.value : "failed")).toEqual(
          entries.slice(1).map(() => "stored")
        )
      }))

    for (
      const [name, escaped] of [["NUL", "\\u0000"], ["a lone surrogate", "\\ud800"]] as const
    ) {
      it.effect(`a signed webhook whose data.id holds ${name} is stored (204) and dead-lettered, not refused`, () =>
        Effect.gen(function*() {
          const marker = `video_${uuid()}`
          const body = JSON.stringify({
            id: `evt_${uuid()}`,
            object: "event",
            created_at: nowSeconds(),
            type: "video.completed",
            data: { id: `${marker}__` }
          }).replace(`${marker}__`, `${marker}${escaped}`)
          const first = yield* post("/webhooks/openai", body, signOpenAI(body))
          expect(first.status).toBe(204)
          const sql = yield* SqlClient.SqlClient
          const rows = yield* eventually(
            sql<{ process_status: string; last_error_code: string | null }>`
              SELECT process_status, last_error_code FROM provider_callback_inbox
              WHERE provider_task_id LIKE ${marker + "%"}`,
            (r) => r[0]?.process_status === "dead"
          )
          expect(rows).toEqual([{ process_status: "dead", last_error_code: "unstorable_text" }])
        }))
    }

    for (
      const [name, payload] of [
        ["videos: 5", { videos: 5 }],
        ["videos: [null]", { videos: [null] }],
        ["video: \"x\"", { video: "x" }]
      ] as const
    ) {
      it.effect(`a signed fal body with ${name} is 204 and its unreadable output is ignored`, () =>
        Effect.gen(function*() {
          const requestId = `req-${uuid()}`
          const { taskId } = yield* submittedTask("fal", requestId)
          const res = yield* falWebhook(requestId, JSON.stringify({ request_id: requestId, status: "OK", payload }))
          expect(res.status).toBe(204)
          yield* eventually(taskRow(taskId), (t) => t.status === "provider_succeeded")
          yield* eventually(inboxRow({ providerTaskId: requestId }), (r) => r[0]?.process_status === "processed")
        }))
    }

    it.effect("a fal body with one unreadable and one good output keeps the good one", () =>
      Effect.gen(function*() {
        const requestId = `req-${uuid()}`
        const { attemptId, taskId } = yield* submittedTask("fal", requestId)
        const body = JSON.stringify({
          request_id: requestId,
          status: "OK",
          payload: { videos: [null, 7, { url: "https://fal.example/v.mp4" }] }
        })
        expect((yield* falWebhook(requestId, body)).status).toBe(204)
        yield* eventually(taskRow(taskId), (t) => t.status === "provider_succeeded")
        const sql = yield* SqlClient.SqlClient
        const [attempt] = yield* sql<{ output_refs: unknown }>`
          SELECT output_refs FROM task_attempts WHERE id = ${attemptId}`
        expect(attempt!.output_refs).toEqual(["https://fal.example/v.mp4"])
      }))

    it.effect("Luma callback tokens expire with their attempt and after CALLBACK_TOKEN_TTL (410)", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const generation = (id: string) => JSON.stringify({ id, state: "dreaming" })
        // an open attempt, a token issued now: accepted
        const generationId = `gen-${uuid()}`
        const open = yield* submittedTask("luma", generationId)
        expect((yield* post(lumaUrl(open.attemptId, nowSeconds()), generation(generationId), {})).status).toBe(204)
        // the same attempt, a token issued two hours ago (the TTL is one): gone
        expect((yield* post(lumaUrl(open.attemptId, nowSeconds() - 7200), generation(generationId), {})).status)
          .toBe(410)
        // a forged token is 401, as before; so is a genuine token moved to another issue time
        const token = callbackToken(TOKEN_SECRET, "luma", open.attemptId, nowSeconds() - 7200)
        expect((yield* post(lumaUrl(open.attemptId, nowSeconds(), token), generation(generationId), {})).status)
          .toBe(401)
        expect((yield* post(lumaUrl(open.attemptId, nowSeconds(), "forged"), generation(generationId), {})).status)
          .toBe(401)

        // a terminal task: its attempt's token is spent
        const ended = yield* admitTask({ provider: "luma" })
        expect((yield* (yield* taskTestClient(ended.taskId)).cancel()).task.status).toBe("canceled")
        expect((yield* post(lumaUrl(ended.attemptId, nowSeconds()), generation(`gen-${uuid()}`), {})).status)
          .toBe(410)

        // a superseded attempt: the task moved on to another attempt
        const old = yield* submittedTask("luma", `gen-${uuid()}`)
        yield* sql`UPDATE generation_tasks SET current_attempt_id = ${uuid()} WHERE id = ${old.taskId}`
        expect((yield* post(lumaUrl(old.attemptId, nowSeconds()), generation(`gen-${uuid()}`), {})).status).toBe(410)
        expect(yield* inboxRow({ attemptId: old.attemptId })).toEqual([])
        expect(yield* inboxRow({ attemptId: ended.attemptId })).toEqual([])
      }))
  })
})
