import type * as HttpRouter from "@effect/platform/HttpRouter"
import { Either, ParseResult, Schema } from "effect"
import type { KeyObject } from "node:crypto"
import { Webhook } from "standardwebhooks"
import type { Job, Phase } from "./SimulatorState.js"

/** What a provider's submit endpoint read from a request. */
export interface SubmitInput {
  readonly headers: Readonly<Record<string, string | undefined>>
  /** The decoded JSON body, or the multipart form as a record of its string fields. */
  readonly body: unknown
  readonly query: URLSearchParams
  /** Path parameters: the model (Replicate's owner/name, fal's app id, Veo's model). */
  readonly model?: string | undefined
  /** Where providers that configure webhooks per account, not per request, deliver (OpenAI). */
  readonly accountWebhookUrl: string | null
}

export interface Accepted {
  readonly model: string
  readonly webhookUrl: string | null
}

/** A refusal with the provider's own status code and error shape. */
export interface Refused {
  readonly status: number
  readonly body: unknown
}

/** A submit endpoint's checks, as the provider's API makes them: what it accepted, or its refusal. */
export type Validate = (input: SubmitInput) => Either.Either<Accepted, Refused>

export interface Delivery {
  readonly url: string
  readonly body: string
  readonly headers: Record<string, string>
}

export interface Signers {
  readonly openaiSecret: string
  readonly replicateSecret: string
  readonly falKey: KeyObject
}

type Handler = HttpRouter.Route.Handler<never, never>

type Params = Readonly<Record<string, string | undefined>>

/** The simulator's generic handlers, bound to one provider, which mounts them on its own paths. */
export interface SimApi {
  /** Validates, creates the job (counted per idempotency key), answers `respond(job)` (default: the job queued). */
  readonly submit: (options: {
    readonly validate: Validate
    readonly respond?: (job: Job) => unknown
    readonly status?: number
    readonly modelOf?: (params: Params) => string | undefined
  }) => Handler
  /**
   * The job named by `id` (default: the `:id` path parameter) rendered by `render` (default: the provider's query
   * answer); `notFound` for none or another provider's.
   */
  readonly job: (options?: {
    readonly id?: (params: Params, body: unknown) => string | undefined
    readonly render?: (job: Job, now: number) => { readonly status: number; readonly body: unknown }
    readonly notFound?: Refused
  }) => Handler
  readonly cancel: Handler
  readonly video: Handler
}

/** One simulated provider: its paths, how it answers queries, and the webhooks it sends. */
export interface SimulatedProvider {
  readonly name: string
  /** The provider's own id for a new job. */
  readonly jobId: (model: string) => string
  /** What the query API answers for a job in `phase`. */
  readonly render: (job: Job, phase: Phase, now: number) => unknown
  /** The webhook sent when a job reaches `phase`, signed as the provider signs; null when it sends none. */
  readonly webhook: (job: Job, phase: Phase, signers: Signers, seq: number) => Delivery | null
  /** Runway and Luma answer a cancel with 204 and no body; the others with the job. */
  readonly cancelAnswersEmpty: boolean
  readonly routes: (api: SimApi) => HttpRouter.HttpRouter<never, never>
}

/** Where the simulator serves a succeeded job's video (GET /_sim/output/...): a real, small MP4. */
export const outputUrl = (job: Job): string =>
  `${job.outputBase}/_sim/output/${job.provider}/${encodeURIComponent(job.id)}.mp4`

export const outcomeOf = (phase: Phase) => (phase._tag === "done" ? phase.outcome : null)

export const standardHeaders = (secret: string, id: string, body: string) => {
  const now = new Date()
  return {
    "content-type": "application/json",
    "webhook-id": id,
    "webhook-timestamp": String(Math.floor(now.getTime() / 1000)),
    "webhook-signature": new Webhook(secret).sign(id, now, body)
  }
}

/** Decodes a request body as the provider's API does: unknown fields are refused too. */
export const decodeStrict = <A, I>(schema: Schema.Schema<A, I>, body: unknown, refuse: (reason: string) => Refused) =>
  Either.mapLeft(
    Schema.decodeUnknownEither(schema, { onExcessProperty: "error" })(body),
    (e) => refuse(ParseResult.TreeFormatter.formatErrorSync(e))
  )
