import { Either, ParseResult, Schema } from "effect"
import { createHash } from "node:crypto"
import type { ErrorClass, NormalizedStatus } from "../schema/observation.js"
import type { Stage } from "../schema/task.js"

/** How a provider authenticates its callbacks. */
export type WebhookScheme = "standard-webhooks" | "fal-ed25519" | "callback-token"

/**
 * What one provider message (a webhook body or a query response) says, normalized: the part of
 * ProviderObservation that comes from the provider. The inbox processor and the poller add the attempt,
 * the source and the trace.
 */
export interface ProviderReport {
  readonly providerTaskId: string | null
  readonly clientRequestId: string | null
  readonly eventType: string
  readonly providerUpdatedAt: Date | null
  readonly providerSequence: number | null
  readonly status: NormalizedStatus
  readonly stage: Stage | null
  readonly progress: number | null
  readonly errorClass: ErrorClass | null
  readonly errorCode: string | null
  readonly outputRefs: ReadonlyArray<string>
}

/**
 * Whether a scheme signs the body. A callback token (Luma) signs nothing: it says the caller holds our callback URL
 * (the provider, or whoever saw the URL), not that what the body says is true.
 */
export const signsBody = (scheme: WebhookScheme): boolean => scheme !== "callback-token"

export const isTerminalReport = (r: ProviderReport): boolean =>
  r.status === "succeeded" || r.status === "failed" || r.status === "canceled"

/**
 * What an unsigned terminal report may say before a query to the provider confirms it: that the job exists and
 * runs, nothing of its outcome or output. Applied as such it still binds an attempt to its provider id (a callback
 * that beats a lost submit response), and can neither end a task nor name its output.
 */
export const unconfirmed = (r: ProviderReport): ProviderReport => ({
  ...r,
  status: "running",
  stage: null,
  progress: null,
  errorClass: null,
  errorCode: null,
  outputRefs: []
})

/** The webhook side of a provider: how it signs and how its bodies read. */
export interface WebhookProtocol {
  readonly scheme: WebhookScheme
  /** Decodes a verified JSON body; Left(reason) for a body that does not match the provider's format. */
  readonly parse: (body: unknown) => Either.Either<ProviderReport, string>
}

/** Decodes a provider body with its Schema (a readable reason on failure) and normalizes it. */
export const parseWith = <A, I>(schema: Schema.Schema<A, I>, toReport: (a: A) => ProviderReport) => {
  const decode = Schema.decodeUnknownEither(schema) // compiled once, not per callback
  return (body: unknown): Either.Either<ProviderReport, string> =>
    decode(body).pipe(
      Either.mapLeft(ParseResult.TreeFormatter.formatErrorSync),
      Either.map(toReport)
    )
}

/**
 * An array of `schema` read leniently: entries of another shape are skipped, and a value that is not an array is
 * read as one entry. For a provider's optional lists (outputs, keys) where one odd entry must not cost the rest, nor
 * crash the code that reads them.
 */
export const skipping = <A, I>(schema: Schema.Schema<A, I>) => {
  const is = Schema.is(Schema.typeSchema(schema))
  return Schema.transform(Schema.Unknown, Schema.Array(Schema.typeSchema(schema)), {
    strict: true,
    decode: (value) => (Array.isArray(value) ? value : [value]).filter(is),
    encode: (entries) => entries
  })
}

/** A provider's time, or null when it is none (out of Date's range, unparseable): never an Invalid Date. */
export const validDate = (date: Date): Date | null => Number.isNaN(date.getTime()) ? null : date

export const sha256hex = (data: Uint8Array | string): string => createHash("sha256").update(data).digest("hex")

/**
 * The inbox's idempotency key: the provider's event id when it has one, else the seed's fallback
 * (provider task id + event type + provider time + payload hash). Even when the fallback misses a duplicate,
 * the transition function makes the second copy a no-op.
 */
export const dedupKeyOf = (eventId: string | null, report: ProviderReport, payloadHash: string): string =>
  eventId !== null
    ? `id:${eventId}`
    : `fb:${report.providerTaskId ?? report.clientRequestId ?? "-"}:${report.eventType}:${
      report.providerUpdatedAt?.toISOString() ?? "-"
    }:${payloadHash}`

/** Clamps a provider's progress (0–1 fractions or 0–100 percentages) to an integer percentage. */
export const percent = (value: number | null | undefined, scale: 1 | 100 = 100): number | null =>
  value === null || value === undefined || !Number.isFinite(value)
    ? null
    : Math.max(0, Math.min(100, Math.round(scale === 1 ? value * 100 : value)))
