import {
  HttpClient,
  HttpClientRequest,
  HttpRouter,
  HttpServer,
  HttpServerRequest,
  HttpServerResponse
} from "@effect/platform"
import { Clock, Duration, Effect, Either, FiberMap, Ref, Schema } from "effect"
import { generateKeyPairSync } from "node:crypto"
import { renderFalResult, renderJob, renderWebhook, type Signers } from "./renderings.js"
import {
  type Accepted,
  falSubmit,
  lumaSubmit,
  openaiSubmit,
  type Refused,
  replicateSubmit,
  runwaySubmit,
  type SubmitInput,
  veoRefuse,
  veoSubmit
} from "./requests.js"
import { sampleMp4 } from "./sampleMp4.js"
import { FaultConfig, type Job, type Phase, phaseOf, pickOutcome, type SimProvider } from "./SimulatorState.js"

export interface SimulatorOptions {
  readonly openaiSecret: string
  readonly replicateSecret: string
  /** Where OpenAI-style providers (webhook endpoint configured per account, not per request) deliver. */
  readonly openaiWebhookUrl: string | null
}

/** A submit body as the provider reads it: multipart (OpenAI, as its SDK sends it) or JSON; null if neither. */
const readBody = (request: HttpServerRequest.HttpServerRequest) =>
  Effect.gen(function*() {
    const type = request.headers["content-type"] ?? ""
    const bytes = yield* request.arrayBuffer
    if (type.startsWith("multipart/form-data")) {
      const form = yield* Effect.promise(() => new Response(bytes, { headers: { "content-type": type } }).formData())
      const fields: Record<string, string> = {}
      form.forEach((v, k) => {
        fields[k] = typeof v === "string" ? v : "(file)"
      })
      return fields
    }
    return JSON.parse(Buffer.from(bytes).toString("utf8")) as unknown
  }).pipe(Effect.orElseSucceed(() => null))

const falRoot = (app: string) => app.split("/").slice(0, 2).join("/")
const veoModelPath = (project: string | undefined, location: string | undefined, model: string) =>
  `projects/${project}/locations/${location}/publishers/google/models/${model}`

const json = (body: unknown, status = 200) => HttpServerResponse.unsafeJson(body, { status })

/**
 * A provider simulator speaking OpenAI Videos, Replicate, fal.ai queue, Runway, Luma and Veo (each under its own
 * path prefix) with real signatures, jobs that progress over time to configurable outcomes, fault injection on
 * webhooks and query APIs, and a count of submissions per idempotency key so tests can prove no duplicate
 * generation. Control API under /_sim.
 */
export const makeSimulator = (options: SimulatorOptions) =>
  Effect.gen(function*() {
    const client = yield* HttpClient.HttpClient
    const faults = yield* Ref.make(FaultConfig.defaults)
    const jobs = new Map<string, Job>()
    const submissions = new Map<string, number>()
    const byKey = new Map<string, string>()
    const stats = {
      webhooksSent: 0,
      webhooksDropped: 0,
      webhooksDuplicated: 0,
      queries: 0,
      throttled: 0,
      downloads: 0
    }
    const fal = generateKeyPairSync("ed25519")
    const signers: Signers = {
      openaiSecret: options.openaiSecret,
      replicateSecret: options.replicateSecret,
      falKey: fal.privateKey
    }
    const timelines = yield* FiberMap.make<string>()
    let seq = 0

    const deliverOnce = (url: string, body: string, headers: Record<string, string>) =>
      client.execute(
        HttpClientRequest.post(url).pipe(
          HttpClientRequest.setHeaders(headers),
          HttpClientRequest.bodyText(body, "application/json")
        )
      ).pipe(
        Effect.map((res) => res.status >= 200 && res.status < 300),
        Effect.timeout("10 seconds"),
        Effect.orElseSucceed(() => false),
        Effect.scoped
      )

    /** One delivery with the configured faults; a lost or refused delivery is retried, as providers do. */
    const deliver = (
      d: { readonly url: string; readonly body: string; readonly headers: Record<string, string> },
      duplicate = true
    ): Effect.Effect<void> =>
      Effect.gen(function*() {
        const f = yield* Ref.get(faults)
        for (let attempt = 1; attempt <= 10; attempt++) {
          yield* Effect.sleep(Duration.millis(f.webhookDelayMs + Math.random() * f.reorderWindowMs))
          if (Math.random() < f.dropWebhooks) {
            stats.webhooksDropped++
          } else {
            if (duplicate && Math.random() < f.duplicateWebhooks) {
              stats.webhooksDuplicated++
              yield* Effect.forkDaemon(deliver(d, false))
            }
            stats.webhooksSent++
            if (yield* deliverOnce(d.url, d.body, d.headers)) return
          }
          yield* Effect.sleep(Duration.millis(f.webhookRetryDelayMs))
        }
      })

    const notify = (job: Job, phase: Phase) => {
      const d = renderWebhook(job, phase, signers, ++seq)
      return d === null ? Effect.void : Effect.forkDaemon(deliver(d))
    }

    /** Walks a job through its phases, sending each provider's webhooks at the changes. */
    const timeline = (job: Job) =>
      Effect.gen(function*() {
        const f = yield* Ref.get(faults)
        yield* notify(job, { _tag: "queued" })
        yield* Effect.sleep(Duration.millis(job.queuedMs))
        yield* notify(job, { _tag: "running", progress: 0 })
        if (f.progressEveryMs > 0) {
          while ((yield* Clock.currentTimeMillis) + f.progressEveryMs < job.createdAt + job.durationMs) {
            yield* Effect.sleep(Duration.millis(f.progressEveryMs))
            yield* notify(job, phaseOf(job, yield* Clock.currentTimeMillis))
          }
        }
        const left = job.createdAt + job.durationMs - (yield* Clock.currentTimeMillis)
        if (left > 0) yield* Effect.sleep(Duration.millis(left))
        yield* notify(job, { _tag: "done", outcome: job.outcome })
      })

    const create = (
      provider: SimProvider,
      key: string,
      model: string,
      webhookUrl: string | null,
      outputBase: string
    ) =>
      Effect.gen(function*() {
        const f = yield* Ref.get(faults)
        const now = yield* Clock.currentTimeMillis
        submissions.set(key, (submissions.get(key) ?? 0) + 1)
        // a Vertex operation is named under its model's full path
        const id = provider === "veo"
          ? `${model}/operations/${crypto.randomUUID()}`
          : `${provider}-${crypto.randomUUID()}`
        const job: Job = {
          provider,
          id,
          clientKey: key,
          model,
          createdAt: now,
          durationMs: f.jobDurationMs,
          queuedMs: Math.floor(f.jobDurationMs * f.queuedShare),
          outcome: pickOutcome(f.outcomes, Math.random()),
          webhookUrl,
          outputBase,
          canceledAt: null
        }
        jobs.set(id, job)
        byKey.set(`${provider}:${key}`, id)
        yield* FiberMap.run(timelines, id, timeline(job))
        return job
      })

    /** Query-API faults: 429 with Retry-After, 5xx, slow answers. */
    const withFaults = <E, R>(handler: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>) =>
      Effect.gen(function*() {
        const f = yield* Ref.get(faults)
        stats.queries++
        if (f.slowMs > 0) yield* Effect.sleep(Duration.millis(f.slowMs))
        if (Math.random() < f.rate429) {
          stats.throttled++
          return HttpServerResponse.unsafeJson({ error: "rate limited" }, {
            status: 429,
            headers: { "retry-after": String(f.retryAfterSeconds) }
          })
        }
        if (Math.random() < f.rate5xx) return json({ error: "upstream error" }, 503)
        if (Math.random() < f.rate401) return json({ error: "invalid api key" }, 401)
        if (Math.random() < f.rateMalformed) return json({ unexpected: "shape" })
        return yield* handler
      })

    const submit = (
      provider: SimProvider,
      validate: (input: SubmitInput) => Either.Either<Accepted, Refused>,
      respond: (job: Job) => unknown,
      modelOf: (params: Readonly<Record<string, string | undefined>>) => string | undefined = () => undefined
    ) =>
      withFaults(Effect.gen(function*() {
        const request = yield* HttpServerRequest.HttpServerRequest
        const body = yield* readBody(request)
        if (body === null) return json({ error: "invalid body" }, 400)
        const url = new URL(request.url, "http://sim")
        const checked = validate({
          headers: request.headers,
          body,
          query: url.searchParams,
          model: modelOf(yield* HttpRouter.params)
        })
        // refused as the real API refuses: nothing is created, nothing is counted
        if (Either.isLeft(checked)) return json(checked.left.body, checked.left.status)
        const key = request.headers["idempotency-key"] ?? `anonymous-${crypto.randomUUID()}`
        const job = yield* create(
          provider,
          key,
          checked.right.model,
          provider === "openai" ? options.openaiWebhookUrl : checked.right.webhookUrl,
          `http://${request.headers.host ?? "127.0.0.1"}`
        )
        const f = yield* Ref.get(faults)
        // accepted, but the response is lost: the client sees a timeout after the job exists
        if (Math.random() < f.submitAcceptThenTimeout) yield* Effect.sleep("10 minutes")
        return json(respond(job), provider === "openai" ? 200 : 201)
      }))

    const jobResponse = (provider: SimProvider, render: (job: Job, now: number) => unknown = renderJob) =>
      withFaults(Effect.gen(function*() {
        const { id } = yield* HttpRouter.params
        const job = jobs.get(id ?? "")
        if (job === undefined || job.provider !== provider) return json({ error: "not found" }, 404)
        return json(render(job, yield* Clock.currentTimeMillis))
      }))

    const cancel = (provider: SimProvider) =>
      withFaults(Effect.gen(function*() {
        const { id } = yield* HttpRouter.params
        const job = jobs.get(id ?? "")
        if (job === undefined || job.provider !== provider) return json({ error: "not found" }, 404)
        const now = yield* Clock.currentTimeMillis
        if (phaseOf(job, now)._tag !== "done") {
          job.canceledAt = now
          yield* FiberMap.remove(timelines, job.id)
          yield* notify(job, { _tag: "done", outcome: "canceled" })
        }
        // Runway and Luma answer a DELETE with 204 and no body
        return provider === "runway" || provider === "luma"
          ? HttpServerResponse.empty({ status: 204 })
          : json(renderJob(job, now))
      }))

    /** Lookup by idempotency key (not a documented API of these providers: see ProviderClients' lookup). */
    const lookup = (provider: SimProvider) =>
      withFaults(Effect.gen(function*() {
        const { key } = yield* HttpRouter.params
        const id = byKey.get(`${provider}:${key ?? ""}`)
        return id === undefined ? json({ error: "not found" }, 404) : json({ provider_task_id: id })
      }))

    const video = (provider: SimProvider) =>
      Effect.gen(function*() {
        const { id } = yield* HttpRouter.params
        const job = jobs.get(decodeURIComponent(id ?? "").replace(/\.mp4$/, ""))
        if (job === undefined || job.provider !== provider) return json({ error: "not found" }, 404)
        const phase = phaseOf(job, yield* Clock.currentTimeMillis)
        if (phase._tag !== "done" || phase.outcome !== "succeeded") return json({ error: "no output" }, 404)
        if (Math.random() < (yield* Ref.get(faults)).rateOutput5xx) return json({ error: "storage unavailable" }, 503)
        stats.downloads++
        return HttpServerResponse.uint8Array(sampleMp4(Math.max(1, Math.round(job.durationMs / 1000))), {
          contentType: "video/mp4"
        })
      })

    /** Vertex: {model}:predictLongRunning and {model}:fetchPredictOperation share one path pattern. */
    const veoCall = withFaults(Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const { call, location, project } = yield* HttpRouter.params
      const [model, method] = (call ?? "").split(":")
      const body = yield* readBody(request)
      if (method === "fetchPredictOperation") {
        const name = (body as { operationName?: unknown } | null)?.operationName
        const job = typeof name === "string" ? jobs.get(name) : undefined
        if (job === undefined || job.provider !== "veo") {
          const r = veoRefuse(`Operation ${String(name)} is not found`, 404)
          return json(r.body, r.status)
        }
        return json(renderJob(job, yield* Clock.currentTimeMillis))
      }
      if (method !== "predictLongRunning") return json(veoRefuse(`Unknown method ${method}`, 404).body, 404)
      const checked = veoSubmit({ headers: request.headers, body, query: new URLSearchParams(), model })
      if (Either.isLeft(checked)) return json(checked.left.body, checked.left.status)
      const key = request.headers["idempotency-key"] ?? `anonymous-${crypto.randomUUID()}`
      const job = yield* create("veo", key, veoModelPath(project, location, model!), null, "")
      return json({ name: job.id })
    }))

    const providerRoutes = HttpRouter.empty.pipe(
      // OpenAI Videos
      HttpRouter.post("/openai/v1/videos", submit("openai", openaiSubmit, (j) => renderJob(j, j.createdAt))),
      HttpRouter.get("/openai/v1/videos/:id", jobResponse("openai")),
      HttpRouter.del("/openai/v1/videos/:id", cancel("openai")),
      HttpRouter.get("/openai/v1/videos/:id/content", video("openai")),
      // Replicate: by version id, or an official model's latest version
      HttpRouter.post(
        "/replicate/v1/predictions",
        submit("replicate", replicateSubmit, (j) => renderJob(j, j.createdAt))
      ),
      HttpRouter.post(
        "/replicate/v1/models/:owner/:name/predictions",
        submit("replicate", replicateSubmit, (j) => renderJob(j, j.createdAt), (p) => `${p.owner}/${p.name}`)
      ),
      HttpRouter.get("/replicate/v1/predictions/:id", jobResponse("replicate")),
      HttpRouter.post("/replicate/v1/predictions/:id/cancel", cancel("replicate")),
      // fal.ai queue: submit to the full endpoint id; status, result and cancel under owner/alias
      HttpRouter.get("/fal/:owner/:alias/requests/:id/status", jobResponse("fal")),
      HttpRouter.get(
        "/fal/:owner/:alias/requests/:id",
        withFaults(Effect.gen(function*() {
          const { id } = yield* HttpRouter.params
          const job = jobs.get(id ?? "")
          if (job === undefined) return json({ detail: "Request not found" }, 404)
          const r = renderFalResult(job, yield* Clock.currentTimeMillis)
          return json(r.body, r.status)
        }))
      ),
      HttpRouter.put("/fal/:owner/:alias/requests/:id/cancel", cancel("fal"))
    )
    const moreProviderRoutes = HttpRouter.empty.pipe(
      HttpRouter.get(
        "/fal/.well-known/jwks.json",
        Effect.succeed(json({
          keys: [{ ...fal.publicKey.export({ format: "jwk" }), kid: "sim-fal-1" }]
        }))
      ),
      HttpRouter.post(
        "/fal/*",
        submit("fal", falSubmit, (j) => ({
          request_id: j.id,
          status: "IN_QUEUE",
          queue_position: 0,
          response_url: `${j.outputBase}/fal/${falRoot(j.model)}/requests/${j.id}`,
          status_url: `${j.outputBase}/fal/${falRoot(j.model)}/requests/${j.id}/status`,
          cancel_url: `${j.outputBase}/fal/${falRoot(j.model)}/requests/${j.id}/cancel`
        }), (p) => p["*"])
      ),
      // Runway (polling only): text_to_video; image_to_video needs a promptImage
      HttpRouter.post(
        "/runway/v1/text_to_video",
        submit("runway", runwaySubmit("text_to_video"), (j) => ({ id: j.id }))
      ),
      HttpRouter.post(
        "/runway/v1/image_to_video",
        submit("runway", runwaySubmit("image_to_video"), (j) => ({ id: j.id }))
      ),
      HttpRouter.get("/runway/v1/tasks/:id", jobResponse("runway")),
      HttpRouter.del("/runway/v1/tasks/:id", cancel("runway")),
      // Luma (unsigned callbacks to callback_url)
      HttpRouter.post(
        "/luma/dream-machine/v1/generations/video",
        submit("luma", lumaSubmit, (j) => renderJob(j, j.createdAt))
      ),
      HttpRouter.get("/luma/dream-machine/v1/generations/:id", jobResponse("luma")),
      HttpRouter.del("/luma/dream-machine/v1/generations/:id", cancel("luma")),
      // Google Veo on Vertex (long-running operations)
      HttpRouter.post("/veo/v1/projects/:project/locations/:location/publishers/google/models/:call", veoCall)
    )
    const lookupRoutes = HttpRouter.empty.pipe(
      HttpRouter.get("/openai/_lookup/:key", lookup("openai")),
      HttpRouter.get("/replicate/_lookup/:key", lookup("replicate")),
      HttpRouter.get("/fal/_lookup/:key", lookup("fal")),
      HttpRouter.get("/runway/_lookup/:key", lookup("runway")),
      HttpRouter.get("/luma/_lookup/:key", lookup("luma")),
      HttpRouter.get("/veo/_lookup/:key", lookup("veo")),
      HttpRouter.get("/_sim/output/openai/:id", video("openai")),
      HttpRouter.get("/_sim/output/replicate/:id", video("replicate")),
      HttpRouter.get("/_sim/output/fal/:id", video("fal")),
      HttpRouter.get("/_sim/output/runway/:id", video("runway")),
      HttpRouter.get("/_sim/output/luma/:id", video("luma")),
      HttpRouter.get("/_sim/output/veo/:id", video("veo"))
    )
    const controlRoutes = HttpRouter.empty.pipe(
      HttpRouter.get("/_sim/faults", Effect.map(Ref.get(faults), (f) => json(f))),
      HttpRouter.post(
        "/_sim/faults",
        Effect.gen(function*() {
          const current = yield* Ref.get(faults)
          const patch = yield* HttpServerRequest.schemaBodyJson(
            Schema.Record({ key: Schema.String, value: Schema.Unknown })
          )
          const next = yield* Schema.decodeUnknown(FaultConfig)({
            ...Schema.encodeSync(FaultConfig)(current),
            ...patch
          })
          yield* Ref.set(faults, next)
          return json(next)
        }).pipe(Effect.catchAll((e) => Effect.succeed(json({ error: String(e) }, 400))))
      ),
      HttpRouter.get(
        "/_sim/counts",
        Effect.sync(() => json({ submissions: Object.fromEntries(submissions), ...stats }))
      ),
      HttpRouter.get(
        "/_sim/jobs",
        Effect.map(Clock.currentTimeMillis, (now) =>
          json([...jobs.values()].map((j) => ({
            provider: j.provider,
            id: j.id,
            key: j.clientKey,
            outcome: j.canceledAt !== null ? "canceled" : j.outcome,
            phase: phaseOf(j, now)
          }))))
      )
    )
    const router = HttpRouter.concatAll(providerRoutes, moreProviderRoutes, lookupRoutes, controlRoutes)

    return {
      router,
      setFaults: (patch: Partial<FaultConfig>) => Ref.update(faults, (f) => FaultConfig.make({ ...f, ...patch })),
      submissions: (key: string) => submissions.get(key) ?? 0,
      jobs: () => [...jobs.values()],
      stats
    } as const
  })

export type Simulator = Effect.Effect.Success<ReturnType<typeof makeSimulator>>

/** The simulator served on an HttpServer; returns the handle and the server's base URL. */
export const serveSimulator = (options: SimulatorOptions) =>
  Effect.gen(function*() {
    const sim = yield* makeSimulator(options)
    const server = yield* HttpServer.HttpServer
    yield* server.serve(yield* HttpRouter.toHttpApp(sim.router))
    const address = server.address
    const baseUrl = address._tag === "TcpAddress" ? `http://127.0.0.1:${address.port}` : "http://unix"
    return { ...sim, baseUrl } as const
  })
