import { HttpClient, HttpClientRequest } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Duration, Effect } from "effect"
import { type KeyObject, sign } from "node:crypto"
import * as http from "node:http"
import { Webhook } from "standardwebhooks"
import { falSigningString } from "../../src/providers/signatures.js"
import { until } from "./admin.js"
import { admitTask, uuid } from "./tasks.js"

/** Helpers for tests that post provider webhooks to a runner's gateway. */
export const nowSeconds = () => Math.floor(Date.now() / 1000)

export const openaiEvent = (videoId: string, type = "video.completed") =>
  JSON.stringify({ id: `evt_${uuid()}`, object: "event", created_at: nowSeconds(), type, data: { id: videoId } })

export const openAISigner =
  (defaultSecret: string) => (body: string, options: { id?: string; ts?: number; secret?: string } = {}) => {
    const id = options.id ?? `msg_${uuid()}`
    const ts = options.ts ?? nowSeconds()
    return {
      "webhook-id": id,
      "webhook-timestamp": String(ts),
      "webhook-signature": new Webhook(options.secret ?? defaultSecret).sign(id, new Date(ts * 1000), body)
    }
  }

export const post = (path: string, body: string, headers: Record<string, string>, contentType = "application/json") =>
  Effect.gen(function*() {
    const client = yield* HttpClient.HttpClient
    const res = yield* client.execute(
      HttpClientRequest.post(path).pipe(
        HttpClientRequest.setHeaders(headers),
        HttpClientRequest.bodyText(body, contentType)
      )
    )
    return { status: res.status, text: yield* res.text }
  }).pipe(Effect.orDie)

export const inboxRows = (provider: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ n: number }>`SELECT count(*)::int AS n FROM provider_callback_inbox WHERE provider = ${provider}`
  ).pipe(
    Effect.map((r) => r[0]!.n)
  )

/** A task with provider `provider` whose first attempt was accepted under `providerTaskId`. */
export const submittedTask = (provider: string, providerTaskId: string) =>
  Effect.gen(function*() {
    const t = yield* admitTask({ provider })
    const sql = yield* SqlClient.SqlClient
    yield* sql`UPDATE task_attempts SET provider_task_id = ${providerTaskId}, submit_state = 'SUBMITTED'
               WHERE id = ${t.attemptId}`
    return t
  })

/** Waits (up to `within`, scaled) until `effect` answers something `predicate` accepts. */
export const eventually = <A, E, R>(
  effect: Effect.Effect<A, E, R>,
  predicate: (a: A) => boolean,
  within: Duration.DurationInput = Duration.seconds(15)
) => until("condition", effect, predicate, within)

export const taskRow = (taskId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ status: string; version: number }>`SELECT status, version FROM generation_tasks WHERE id = ${taskId}`
  ).pipe(
    Effect.map((r) => r[0]!)
  )

/** The OpenAI webhook secret the webhook tests' runners are configured with. */
export const OPENAI_TEST_SECRET = "whsec_" + Buffer.from("openai-test-secret-32-bytes-long!").toString("base64")

/** fal's JWKS for the test's key pair, served like fal serves it; resolves with its URL (for FAL_JWKS_URL). */
export const serveFalJwks = async (publicKey: KeyObject): Promise<string> => {
  const server = http.createServer((_, res) => {
    res.setHeader("content-type", "application/json")
    res.end(JSON.stringify({ keys: [{ ...publicKey.export({ format: "jwk" }), kid: "fal-test" }] }))
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  return `http://127.0.0.1:${(server.address() as { port: number }).port}/jwks.json`
}

/** The headers of a fal webhook about `requestId`, signed with the test's fal key for fal account `userId`. */
export const falHeaders = (privateKey: KeyObject, requestId: string, body: string, userId = "user-1") => {
  const ts = String(nowSeconds())
  return {
    "x-fal-webhook-request-id": requestId,
    "x-fal-webhook-user-id": userId,
    "x-fal-webhook-timestamp": ts,
    "x-fal-webhook-signature": sign(
      null,
      Buffer.from(falSigningString(requestId, userId, ts, new TextEncoder().encode(body))),
      privateKey
    ).toString("hex")
  }
}
