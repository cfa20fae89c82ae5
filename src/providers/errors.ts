import { Data, type Duration, type Option } from "effect"

/** How provider calls fail, classified: what the submitter, the poller and the transport agree on. */

/** The provider definitely did not accept the job: safe to retry within a budget, maybe elsewhere. */
export class SubmitRejected extends Data.TaggedError("SubmitRejected")<{
  readonly code: string
  readonly detail?: string
}> {}
/** The request may have reached the provider (timeout, reset, 5xx): SUBMIT_UNKNOWN, never re-submit blindly. */
export class SubmitUnknown extends Data.TaggedError("SubmitUnknown")<{ readonly reason: string }> {}

/** This provider offers no lookup by our idempotency key: an unknown submit waits for a callback or a human. */
export class LookupUnsupported extends Data.TaggedError("LookupUnsupported")<{ readonly provider: string }> {}

/**
 * A failed query or cancel, classified per seed 12.8.4. Never a reason to re-submit. Structurally the domain's
 * `PollFailure` (kind + retryAfter), so the poll policy needs no import from here.
 */
export class ProviderCallFailed extends Data.TaggedError("ProviderCallFailed")<{
  readonly kind: "rate_limited" | "server" | "network" | "not_found" | "auth" | "malformed"
  readonly retryAfter: Option.Option<Duration.Duration>
  readonly detail: string
}> {}
