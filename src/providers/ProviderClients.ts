import { HttpBody, HttpClient, HttpClientRequest, type HttpClientResponse } from "@effect/platform"
import { Config, Data, Duration, Effect, Option, Redacted, Schema } from "effect"
import { falOutputUrls, FalStatus, falStatusReport } from "./fal.js"
import { LumaGeneration, lumaReport } from "./luma.js"
import { OpenAIVideo, openaiVideoReport } from "./openai.js"
import type { ProviderReport } from "./ProviderAdapter.js"
import { ReplicatePrediction, replicateReport } from "./replicate.js"
import { runwayReport, RunwayTask } from "./runway.js"
import { callbackToken } from "./signatures.js"
import { VeoOperation, veoReport } from "./veo.js"

/** The provider definitely did not accept the job: safe to retry within a budget, maybe elsewhere. */
export class SubmitRejected extends Data.TaggedError("SubmitRejected")<{ readonly code: string }> {}
/** The request may have reached the provider (timeout, reset, 5xx): SUBMIT_UNKNOWN, never re-submit blindly. */
export class SubmitUnknown extends Data.TaggedError("SubmitUnknown")<{ readonly reason: string }> {}

/** This provider offers no lookup by our idempotency key: an unknown submit waits for a callback or a human. */
export class LookupUnsupported extends Data.TaggedError("LookupUnsupported")<{ readonly provider: string }> {}

/** A failed query or cancel, classified per seed 12.8.4. Never a reason to re-submit. */
export class ProviderCallFailed extends Data.TaggedError("ProviderCallFailed")<{
  readonly kind: "rate_limited" | "server" | "network" | "not_found" | "auth" | "malformed"
  readonly retryAfter: Option.Option<Duration.Duration>
  readonly detail: string
}> {}

export interface SubmitRequest {
  readonly attemptId: string
  /** Sent as the Idempotency-Key: the same key is never used for two generations. */
  readonly clientRequestId: string
  readonly model: string
  readonly prompt: string
  readonly durationSeconds: number
}

/** Submit, query and cancel for one provider, normalized into ProviderReport and classified errors. */
export interface ProviderClient {
  readonly submit: (
    r: SubmitRequest
  ) => Effect.Effect<{ readonly providerTaskId: string }, SubmitRejected | SubmitUnknown>
  readonly query: (providerTaskId: string, model: string) => Effect.Effect<ProviderReport, ProviderCallFailed>
  readonly cancel: (providerTaskId: string, model: string) => Effect.Effect<void, ProviderCallFailed>
  /**
   * Which job (if any) the provider holds for our idempotency key: how an unknown submit is resolved without
   * ever submitting twice. None means the provider confirms it has nothing.
   */
  readonly lookup: (
    clientRequestId: string
  ) => Effect.Effect<Option.Option<string>, ProviderCallFailed | LookupUnsupported>
  /** How to download one output reference (None: a location this client cannot fetch, e.g. gs://). */
  readonly outputRequest: (ref: string) => Option.Option<HttpClientRequest.HttpClientRequest>
}

const LookupAnswer = Schema.Struct({ provider_task_id: Schema.String })

const defaults: Record<string, string> = {
  openai: "https://api.openai.com",
  replicate: "https://api.replicate.com",
  fal: "https://queue.fal.run",
  runway: "https://api.dev.runwayml.com",
  luma: "https://api.lumalabs.ai",
  veo: "https://us-central1-aiplatform.googleapis.com"
}

const retryAfterOf = (res: HttpClientResponse.HttpClientResponse) => {
  const seconds = Number(res.headers["retry-after"])
  return Number.isFinite(seconds) && seconds >= 0 ? Option.some(Duration.seconds(seconds)) : Option.none()
}

const classify = (res: HttpClientResponse.HttpClientResponse): ProviderCallFailed | null =>
  res.status < 300 ? null : new ProviderCallFailed({
    kind: res.status === 429
      ? "rate_limited"
      : res.status === 404
      ? "not_found"
      : res.status === 401 || res.status === 403
      ? "auth"
      : "server",
    retryAfter: retryAfterOf(res),
    detail: `HTTP ${res.status}`
  })

/** The HTTP clients of every configured provider: base URL and API key from <PROVIDER>_BASE_URL / _API_KEY. */
export class ProviderClients extends Effect.Service<ProviderClients>()("ProviderClients", {
  effect: Effect.gen(function*() {
    const http = yield* HttpClient.HttpClient
    const publicBaseUrl = yield* Config.string("PUBLIC_BASE_URL").pipe(Config.withDefault("http://127.0.0.1:3000"))
    const tokenSecret = yield* Config.option(Config.redacted("CALLBACK_TOKEN_SECRET"))
    const timeout = yield* Config.duration("PROVIDER_TIMEOUT").pipe(Config.withDefault(Duration.seconds(15)))
    const settings = yield* Effect.forEach(Object.keys(defaults), (name) =>
      Effect.map(
        Config.all({
          baseUrl: Config.string(`${name.toUpperCase()}_BASE_URL`).pipe(Config.withDefault(defaults[name]!)),
          apiKey: Config.option(Config.redacted(`${name.toUpperCase()}_API_KEY`)),
          // None of these providers documents a lookup by idempotency key (Kling's external_task_id is the
          // closest): it is off unless the endpoint is known to exist (the simulator has it). Off, an unknown
          // submit is never guessed to be absent: it waits for a callback, then goes to manual review.
          lookup: Config.boolean(`${name.toUpperCase()}_LOOKUP`).pipe(Config.withDefault(false))
        }),
        (s) => [name, s] as const
      ))
    const webhookUrl = (provider: string) => `${publicBaseUrl}/webhooks/${provider}`

    const make = (
      name: string,
      { apiKey, baseUrl, lookup }: { baseUrl: string; apiKey: Option.Option<Redacted.Redacted>; lookup: boolean }
    ): ProviderClient => {
      const request = (method: "GET" | "POST" | "PUT" | "DELETE", path: string, body?: unknown, key?: string) => {
        let req = HttpClientRequest.make(method)(`${baseUrl}${path}`)
        if (Option.isSome(apiKey)) req = HttpClientRequest.bearerToken(req, Redacted.value(apiKey.value))
        if (key !== undefined) req = HttpClientRequest.setHeader(req, "idempotency-key", key)
        if (body !== undefined) req = HttpClientRequest.setBody(req, HttpBody.unsafeJson(body))
        return http.execute(req).pipe(Effect.timeout(timeout), Effect.scoped)
      }

      const call = <A, I>(
        method: "GET" | "POST" | "PUT" | "DELETE",
        path: string,
        schema: Schema.Schema<A, I>,
        body?: unknown
      ) => Effect.map(callWithStatus(method, path, schema, body, []), (r) => r.body)

      /** A call whose listed non-2xx statuses are answers (with a body), not failures. */
      const callWithStatus = <A, I>(
        method: "GET" | "POST" | "PUT" | "DELETE",
        path: string,
        schema: Schema.Schema<A, I>,
        body: unknown,
        answers: ReadonlyArray<number>
      ) =>
        request(method, path, body).pipe(
          Effect.mapError((e) =>
            new ProviderCallFailed({ kind: "network", retryAfter: Option.none(), detail: String(e) })
          ),
          Effect.flatMap((res) => {
            const failed = answers.includes(res.status) ? null : classify(res)
            if (failed !== null) return Effect.fail(failed)
            return res.json.pipe(
              Effect.flatMap(Schema.decodeUnknown(schema)),
              Effect.map((decoded) => ({ status: res.status, body: decoded })),
              Effect.mapError((e) =>
                new ProviderCallFailed({ kind: "malformed", retryAfter: Option.none(), detail: String(e) })
              )
            )
          })
        )

      const submitWith =
        <A, I>(path: string, body: unknown, schema: Schema.Schema<A, I>, idOf: (a: A) => string) =>
        (r: SubmitRequest) =>
          request("POST", path, body, r.clientRequestId).pipe(
            // no response: the request may have been processed
            Effect.mapError((e) => new SubmitUnknown({ reason: String(e) })),
            Effect.flatMap((res): Effect.Effect<{ providerTaskId: string }, SubmitRejected | SubmitUnknown> => {
              if (res.status >= 500 || res.status === 408) {
                return Effect.fail(new SubmitUnknown({ reason: `HTTP ${res.status}` }))
              }
              if (res.status >= 300) return Effect.fail(new SubmitRejected({ code: `http_${res.status}` }))
              return res.json.pipe(
                Effect.flatMap(Schema.decodeUnknown(schema)),
                Effect.map((a) => ({ providerTaskId: idOf(a) })),
                // accepted, but we cannot read what: treat as unknown and resolve by query
                Effect.mapError((e) => new SubmitUnknown({ reason: `unreadable submit response: ${e}` }))
              )
            })
          )

      const common = {
        lookup: (key: string) =>
          !lookup
            ? Effect.fail(new LookupUnsupported({ provider: name }))
            : callWithStatus("GET", `/_lookup/${encodeURIComponent(key)}`, Schema.Unknown, undefined, [404]).pipe(
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
            ),
        outputRequest: (ref: string): Option.Option<HttpClientRequest.HttpClientRequest> => {
          if (ref.startsWith("openai:video:")) {
            const req = HttpClientRequest.get(`${baseUrl}/v1/videos/${ref.slice("openai:video:".length)}/content`)
            return Option.some(
              Option.isSome(apiKey) ? HttpClientRequest.bearerToken(req, Redacted.value(apiKey.value)) : req
            )
          }
          // provider output URLs are pre-signed or public: our API key is never sent to them
          return /^https?:\/\//.test(ref) ? Option.some(HttpClientRequest.get(ref)) : Option.none()
        }
      }

      switch (name) {
        case "openai":
          return {
            ...common,
            submit: (r) =>
              submitWith(
                "/v1/videos",
                { model: r.model, prompt: r.prompt, seconds: String(r.durationSeconds) },
                OpenAIVideo,
                (v) => v.id
              )(r),
            query: (id) => Effect.map(call("GET", `/v1/videos/${id}`, OpenAIVideo), openaiVideoReport),
            cancel: (id) => Effect.asVoid(call("DELETE", `/v1/videos/${id}`, Schema.Unknown))
          }
        case "replicate":
          return {
            ...common,
            submit: (r) =>
              submitWith(
                "/v1/predictions",
                {
                  version: r.model,
                  input: { prompt: r.prompt, duration: r.durationSeconds },
                  webhook: webhookUrl("replicate"),
                  webhook_events_filter: ["start", "completed"]
                },
                ReplicatePrediction,
                (p) => p.id
              )(r),
            query: (id) => Effect.map(call("GET", `/v1/predictions/${id}`, ReplicatePrediction), replicateReport),
            cancel: (id) => Effect.asVoid(call("POST", `/v1/predictions/${id}/cancel`, Schema.Unknown))
          }
        case "fal":
          return {
            ...common,
            submit: (r) =>
              submitWith(
                `/${r.model}?fal_webhook=${encodeURIComponent(webhookUrl("fal"))}`,
                { prompt: r.prompt, duration: r.durationSeconds },
                Schema.Struct({ request_id: Schema.String }),
                (a) => a.request_id
              )(r),
            // COMPLETED only says it ended: the result endpoint says how
            query: (id, model) =>
              Effect.flatMap(call("GET", `/${model}/requests/${id}/status`, FalStatus), (s) =>
                s.status !== "COMPLETED"
                  ? Effect.succeed(falStatusReport(id, s))
                  : Effect.map(
                    callWithStatus("GET", `/${model}/requests/${id}`, Schema.Unknown, undefined, [400, 422]),
                    (r): ProviderReport =>
                      r.status === 200
                        ? {
                          ...falStatusReport(id, s),
                          eventType: "result.OK",
                          status: "succeeded",
                          outputRefs: falOutputUrls(r.body)
                        }
                        : {
                          ...falStatusReport(id, s),
                          eventType: "result.ERROR",
                          status: "failed",
                          errorClass: "provider_failed",
                          errorCode: `http_${r.status}`
                        }
                  )),
            cancel: (id, model) => Effect.asVoid(call("PUT", `/${model}/requests/${id}/cancel`, Schema.Unknown))
          }
        case "runway":
          return {
            ...common,
            submit: (r) =>
              submitWith(
                "/v1/image_to_video",
                { model: r.model, promptText: r.prompt, duration: r.durationSeconds },
                Schema.Struct({ id: Schema.String }),
                (a) => a.id
              )(r),
            query: (id) => Effect.map(call("GET", `/v1/tasks/${id}`, RunwayTask), runwayReport),
            cancel: (id) => Effect.asVoid(call("DELETE", `/v1/tasks/${id}`, Schema.Unknown))
          }
        case "luma":
          return {
            ...common,
            submit: (r) => {
              const token = Option.match(tokenSecret, {
                onNone: () => "",
                onSome: (s) => callbackToken(Redacted.value(s), "luma", r.attemptId)
              })
              return submitWith(
                "/dream-machine/v1/generations",
                {
                  prompt: r.prompt,
                  model: r.model,
                  callback_url: `${webhookUrl("luma")}?attempt=${r.attemptId}&token=${token}`
                },
                LumaGeneration,
                (g) => g.id
              )(r)
            },
            query: (id) => Effect.map(call("GET", `/dream-machine/v1/generations/${id}`, LumaGeneration), lumaReport),
            cancel: (id) => Effect.asVoid(call("DELETE", `/dream-machine/v1/generations/${id}`, Schema.Unknown))
          }
        default:
          return {
            ...common,
            submit: (r) =>
              submitWith(
                `/v1/models/${r.model}/predictLongRunning`,
                {
                  instances: [{ prompt: r.prompt }],
                  parameters: { durationSeconds: r.durationSeconds }
                },
                Schema.Struct({ name: Schema.String }),
                (a) => a.name
              )(r),
            query: (name) => Effect.map(call("GET", `/v1/${name}`, VeoOperation), veoReport),
            // Veo has no cancel for generations: the operation runs to its end
            cancel: () => Effect.void
          }
      }
    }

    const clients = new Map(settings.map(([name, s]) => [name, make(name, s)]))
    return {
      get: (provider: string): Option.Option<ProviderClient> => Option.fromNullable(clients.get(provider))
    } as const
  })
}) {}
