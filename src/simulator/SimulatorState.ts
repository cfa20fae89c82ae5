import { Schema } from "effect"

/** The simulator's fault knobs; every probability is per delivery or per request. */
export class FaultConfig extends Schema.Class<FaultConfig>("FaultConfig")({
  /** How long a job takes from submit to its terminal state. */
  jobDurationMs: Schema.Int.pipe(Schema.positive()),
  /** The first share of a job's duration is spent queued. */
  queuedShare: Schema.Number.pipe(Schema.between(0, 1)),
  /** Outcome weights: a job ends succeeded / failed / canceled in these proportions. */
  outcomes: Schema.Struct({ succeeded: Schema.NonNegative, failed: Schema.NonNegative, canceled: Schema.NonNegative }),
  /** Webhook faults: a dropped delivery is retried later, like providers retry failed deliveries. */
  dropWebhooks: Schema.Number.pipe(Schema.between(0, 1)),
  duplicateWebhooks: Schema.Number.pipe(Schema.between(0, 1)),
  /** Extra random delay (0..this) per delivery, so deliveries overtake each other. */
  reorderWindowMs: Schema.NonNegativeInt,
  webhookDelayMs: Schema.NonNegativeInt,
  webhookRetryDelayMs: Schema.NonNegativeInt,
  /** Query API faults. */
  rate429: Schema.Number.pipe(Schema.between(0, 1)),
  retryAfterSeconds: Schema.NonNegativeInt,
  rate5xx: Schema.Number.pipe(Schema.between(0, 1)),
  slowMs: Schema.NonNegativeInt,
  /** Query API answers 401 (a revoked credential) / a 200 body in no known format. */
  rate401: Schema.Number.pipe(Schema.between(0, 1)),
  rateMalformed: Schema.Number.pipe(Schema.between(0, 1)),
  /**
   * The routes (`provider/model`, e.g. `runway/gen4.5`) the API faults above (429, 5xx, slow, 401, malformed) hit, on
   * the kinds of request `faultKinds` names; empty: every request.
   */
  faultRoutes: Schema.Array(Schema.String),
  /** Which of a `faultRoutes` route's requests the faults hit: its submits, the queries of its jobs, or both. */
  faultKinds: Schema.Array(Schema.Literal("submit", "query")),
  /** The job is created, but the submit response never arrives (the client times out). */
  submitAcceptThenTimeout: Schema.Number.pipe(Schema.between(0, 1)),
  /** Output downloads answered 503 (the provider's storage is failing). */
  rateOutput5xx: Schema.Number.pipe(Schema.between(0, 1)),
  /** Progress webhooks (where the provider sends them) every this many ms while running; 0 = none. */
  progressEveryMs: Schema.NonNegativeInt
}) {
  static readonly defaults = new FaultConfig({
    jobDurationMs: 3000,
    queuedShare: 0.2,
    outcomes: { succeeded: 1, failed: 0, canceled: 0 },
    dropWebhooks: 0,
    duplicateWebhooks: 0,
    reorderWindowMs: 0,
    webhookDelayMs: 0,
    webhookRetryDelayMs: 500,
    rate429: 0,
    retryAfterSeconds: 1,
    rate5xx: 0,
    slowMs: 0,
    rate401: 0,
    rateMalformed: 0,
    faultRoutes: [],
    faultKinds: ["submit", "query"],
    submitAcceptThenTimeout: 0,
    rateOutput5xx: 0,
    progressEveryMs: 0
  })
}

export type Outcome = "succeeded" | "failed" | "canceled"

export interface Job {
  /** The simulated provider's name (its path prefix). */
  readonly provider: string
  readonly id: string
  readonly clientKey: string
  readonly model: string
  readonly createdAt: number
  readonly durationMs: number
  readonly queuedMs: number
  readonly outcome: Outcome
  readonly webhookUrl: string | null
  /** The simulator's own address as the client reached it: where outputs are downloaded from. */
  readonly outputBase: string
  canceledAt: number | null
}

export type Phase =
  | { readonly _tag: "queued" }
  | { readonly _tag: "running"; readonly progress: number }
  | { readonly _tag: "done"; readonly outcome: Outcome }

/** Where a job is at `now`: the simulator's truth, from which every API answer and webhook is derived. */
export const phaseOf = (job: Job, now: number): Phase => {
  if (job.canceledAt !== null && job.canceledAt <= now) return { _tag: "done", outcome: "canceled" }
  const elapsed = now - job.createdAt
  if (elapsed >= job.durationMs) return { _tag: "done", outcome: job.outcome }
  if (elapsed < job.queuedMs) return { _tag: "queued" }
  const runMs = Math.max(1, job.durationMs - job.queuedMs)
  return { _tag: "running", progress: Math.min(99, Math.floor(((elapsed - job.queuedMs) / runMs) * 100)) }
}

export const pickOutcome = (weights: FaultConfig["outcomes"], r: number): Outcome => {
  const total = weights.succeeded + weights.failed + weights.canceled
  if (total === 0) return "succeeded"
  const x = r * total
  return x < weights.succeeded ? "succeeded" : x < weights.succeeded + weights.failed ? "failed" : "canceled"
}
