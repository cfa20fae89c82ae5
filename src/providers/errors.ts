import { Data, type Duration, type Option } from "effect"

/** How provider calls fail, classified: what the submitter, the poller and the transport agree on. */

/** The provider definitely did not accept the job: safe to retry within a budget, maybe elsewhere. */
export class SubmitRejected extends Data.TaggedError("SubmitRejected")<{
  readonly code: string
  readonly detail?: string
}> {}
/** The request may have reached the provider (timeout, reset, 5xx): SUBMIT_UNKNOWN, never re-submit blindly. */
export class SubmitUnknown extends Data.TaggedError("SubmitUnknown")<{
  readonly reason: string
  /** the HTTP status, when there was an answer (a 5xx, a 408, an unreadable 2xx) */
  readonly status?: number
}> {}

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
  /** the HTTP status, when there was an answer */
  readonly status?: number
}> {}

/**
 * Whether a failed call counts against the provider's breaker (src/quota/ProviderBreaker.ts): a 5xx, a 408, a
 * timeout or no answer at all. A 4xx or a 429 is an answer about the request or the quota, handled by the caller;
 * an unreadable 2xx is a contract problem, not an outage.
 */
export const isProviderFault = (e: ProviderCallFailed | SubmitRejected | SubmitUnknown): boolean => {
  switch (e._tag) {
    case "ProviderCallFailed":
      return e.kind === "network" ||
        (e.kind === "server" && (e.status === undefined || e.status >= 500 || e.status === 408))
    case "SubmitUnknown":
      return e.status === undefined || e.status >= 500 || e.status === 408
    case "SubmitRejected":
      return false
  }
}
