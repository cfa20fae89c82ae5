import { HttpClient, HttpClientRequest } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Duration, Effect, Schedule } from "effect"
import { Webhook } from "standardwebhooks"
import { scaledDuration } from "./env.js"
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
) =>
  effect.pipe(
    Effect.filterOrFail(predicate, () => "not yet"),
    Effect.retry(Schedule.spaced(Duration.millis(100)).pipe(Schedule.upTo(scaledDuration(within)))),
    Effect.orDie
  )

export const taskRow = (taskId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ status: string; version: number }>`SELECT status, version FROM generation_tasks WHERE id = ${taskId}`
  ).pipe(
    Effect.map((r) => r[0]!)
  )
