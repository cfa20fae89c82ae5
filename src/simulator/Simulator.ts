import * as HttpClient from "@effect/platform/HttpClient"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import * as HttpRouter from "@effect/platform/HttpRouter"
import * as HttpServer from "@effect/platform/HttpServer"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Clock, Duration, Effect, Either, FiberMap, Option, Ref, Schema } from "effect"
import { generateKeyPairSync } from "node:crypto"
import { sha256hex } from "../providers/ProviderAdapter.js"
import { sampleMp4 } from "./sampleMp4.js"
import type { Signers, SimApi, SimulatedProvider } from "./SimulatedProvider.js"
import { simulatedProviders } from "./simulatedProviders.js"
import { FaultConfig, type Job, type Phase, phaseOf, pickOutcome } from "./SimulatorState.js"

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
    /** When each job was queried (its status read), so tests can prove that no poll was duplicated. */
    const queried = new Map<string, Array<number>>()
    const stats = {
      webhooksSent: 0,
      webhooksDropped: 0,
      webhooksDuplicated: 0,
      queries: 0,
      throttled: 0,
      downloads: 0,
      /** requests of a `faultRoutes` route answered with a fault, by route and kind (`runway/gen4.5 submit`) */
      routeFaults: {} as Record<string, number>
    }
    const fal = generateKeyPairSync("ed25519")
    const providers = simulatedProviders(fal.publicKey.export({ format: "jwk" }))
    const byName = new Map(providers.map((p) => [p.name, p]))
    const signers: Signers = {
      openaiSecret: options.openaiSecret,
      replicateSecret: options.replicateSecret,
      falKey: fal.privateKey
    }
    /** Deliveries the platform answered 2xx: "<provider> <sha256 of the body>" (its inbox must hold each). */
    const acked = new Set<string>()
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
            if (yield* deliverOnce(d.url, d.body, d.headers)) {
              acked.add(`${/\/webhooks\/([^/?]+)/.exec(d.url)?.[1] ?? "?"} ${sha256hex(d.body)}`)
              return
            }
          }
          yield* Effect.sleep(Duration.millis(f.webhookRetryDelayMs))
        }
      })

    const notify = (job: Job, phase: Phase) => {
      const d = byName.get(job.provider)!.webhook(job, phase, signers, ++seq)
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
      provider: SimulatedProvider,
      key: string,
      model: string,
      webhookUrl: string | null,
      outputBase: string
    ) =>
      Effect.gen(function*() {
        const f = yield* Ref.get(faults)
        const now = yield* Clock.currentTimeMillis
        submissions.set(key, (submissions.get(key) ?? 0) + 1)
        const id = provider.jobId(model)
        const job: Job = {
          provider: provider.name,
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
        byKey.set(`${provider.name}:${key}`, id)
        yield* FiberMap.run(timelines, id, timeline(job))
        return job
      })

    /** The API faults for a request (of `route`, `provider/model`, once known): a fault's answer, or None. */
    const faultOf = (f: FaultConfig) =>
      Effect.gen(function*() {
        if (f.slowMs > 0) yield* Effect.sleep(Duration.millis(f.slowMs))
        if (Math.random() < f.rate429) {
          stats.throttled++
          return Option.some(HttpServerResponse.unsafeJson({ error: "rate limited" }, {
            status: 429,
            headers: { "retry-after": String(f.retryAfterSeconds) }
          }))
        }
        if (Math.random() < f.rate5xx) return Option.some(json({ error: "upstream error" }, 503))
        if (Math.random() < f.rate401) return Option.some(json({ error: "invalid api key" }, 401))
        if (Math.random() < f.rateMalformed) return Option.some(json({ unexpected: "shape" }))
        return Option.none()
      })

    /** Faults of one route only (`faultRoutes`): applied by the handler once it knows the request's model. */
    const routeFault = (route: string, kind: "submit" | "query") =>
      Effect.flatMap(Ref.get(faults), (f) =>
        f.faultRoutes.includes(route) && f.faultKinds.includes(kind)
          ? Effect.tap(faultOf(f), (fault) =>
            Effect.sync(() => {
              const key = `${route} ${kind}`
              if (Option.isSome(fault)) stats.routeFaults[key] = (stats.routeFaults[key] ?? 0) + 1
            }))
          : Effect.succeedNone)

    /** Query-API faults: 429 with Retry-After, 5xx, slow answers; on every request unless `faultRoutes` names some. */
    const withFaults = <E, R>(handler: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>) =>
      Effect.gen(function*() {
        const f = yield* Ref.get(faults)
        stats.queries++
        if (f.faultRoutes.length === 0) {
          const fault = yield* faultOf(f)
          if (Option.isSome(fault)) return fault.value
        }
        return yield* handler
      })

    /** The generic handlers, bound to one provider: it mounts them on its own paths. */
    const apiFor = (provider: SimulatedProvider): SimApi => {
      const ownJob = (id: string | undefined) => {
        const job = id === undefined ? undefined : jobs.get(id)
        return job !== undefined && job.provider === provider.name ? job : undefined
      }
      return {
        submit: ({ modelOf, respond, status, validate }) =>
          withFaults(Effect.gen(function*() {
            const request = yield* HttpServerRequest.HttpServerRequest
            const body = yield* readBody(request)
            if (body === null) return json({ error: "invalid body" }, 400)
            const checked = validate({
              headers: request.headers,
              body,
              query: new URL(request.url, "http://sim").searchParams,
              model: modelOf?.(yield* HttpRouter.params),
              accountWebhookUrl: options.openaiWebhookUrl
            })
            // refused as the real API refuses: nothing is created, nothing is counted
            if (Either.isLeft(checked)) return json(checked.left.body, checked.left.status)
            const fault = yield* routeFault(`${provider.name}/${checked.right.model}`, "submit")
            if (Option.isSome(fault)) return fault.value
            const key = request.headers["idempotency-key"] ?? `anonymous-${crypto.randomUUID()}`
            const job = yield* create(
              provider,
              key,
              checked.right.model,
              checked.right.webhookUrl,
              `http://${request.headers.host ?? "127.0.0.1"}`
            )
            const f = yield* Ref.get(faults)
            // accepted, but the response is lost: the client sees a timeout after the job exists
            if (Math.random() < f.submitAcceptThenTimeout) yield* Effect.sleep("10 minutes")
            return json(respond ? respond(job) : provider.render(job, { _tag: "queued" }, job.createdAt), status ?? 201)
          })),
        job: (o = {}) =>
          withFaults(Effect.gen(function*() {
            const params = yield* HttpRouter.params
            const body = o.id === undefined ? null : yield* readBody(yield* HttpServerRequest.HttpServerRequest)
            const job = ownJob(o.id === undefined ? params.id : o.id(params, body))
            const notFound = o.notFound ?? { status: 404, body: { error: "not found" } }
            if (job === undefined) return json(notFound.body, notFound.status)
            const fault = yield* routeFault(`${provider.name}/${job.model}`, "query")
            if (Option.isSome(fault)) return fault.value
            const now = yield* Clock.currentTimeMillis
            const times = queried.get(job.id)
            if (times === undefined) queried.set(job.id, [now])
            else times.push(now)
            const r = o.render
              ? o.render(job, now)
              : { status: 200, body: provider.render(job, phaseOf(job, now), now) }
            return json(r.body, r.status)
          })),
        cancel: withFaults(Effect.gen(function*() {
          const job = ownJob((yield* HttpRouter.params).id)
          if (job === undefined) return json({ error: "not found" }, 404)
          const now = yield* Clock.currentTimeMillis
          if (phaseOf(job, now)._tag !== "done") {
            job.canceledAt = now
            yield* FiberMap.remove(timelines, job.id)
            yield* notify(job, { _tag: "done", outcome: "canceled" })
          }
          return provider.cancelAnswersEmpty
            ? HttpServerResponse.empty({ status: 204 })
            : json(provider.render(job, phaseOf(job, now), now))
        })),
        video: video(provider.name)
      }
    }

    /** Lookup by idempotency key: not an API of these providers (see src/providers/simulatorLookup.ts). */
    const lookup = (provider: string) =>
      withFaults(Effect.gen(function*() {
        const { key } = yield* HttpRouter.params
        const id = byKey.get(`${provider}:${key ?? ""}`)
        return id === undefined ? json({ error: "not found" }, 404) : json({ provider_task_id: id })
      }))

    function video(provider: string) {
      return Effect.gen(function*() {
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
    }

    const providerRoutes = providers.map((p) =>
      HttpRouter.concat(
        p.routes(apiFor(p)),
        HttpRouter.empty.pipe(
          HttpRouter.get(`/${p.name}/_lookup/:key`, lookup(p.name)),
          HttpRouter.get(`/_sim/output/${p.name}/:id`, video(p.name))
        )
      )
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
      HttpRouter.get("/_sim/acked", Effect.sync(() => json([...acked]))),
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
    const router = HttpRouter.concatAll(...providerRoutes, controlRoutes)

    return {
      router,
      setFaults: (patch: Partial<FaultConfig>) => Ref.update(faults, (f) => FaultConfig.make({ ...f, ...patch })),
      submissions: (key: string) => submissions.get(key) ?? 0,
      /**
       * A job created as an accepted submission under `key` would create it, with no webhook: for a bench that starts
       * with tasks already in flight (bench:polling). Its provider task id.
       */
      seed: (providerName: string, key: string, model: string, outputBase: string) =>
        Effect.map(create(byName.get(providerName)!, key, model, null, outputBase), (job) => job.id),
      /** When the job `id` (the provider's task id) was queried, in ms, oldest first. */
      queriesOf: (id: string): ReadonlyArray<number> => queried.get(id) ?? [],
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
