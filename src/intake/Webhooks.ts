import { Clock, Effect, Either, Exit, Metric, Option } from "effect"
import * as S from "../config/Settings.js"
import {
  callbackLagSeconds,
  webhookCallbacks,
  webhookPersistSeconds,
  webhookVerifyFailures
} from "../observability/metrics.js"
import { seriesBy } from "../observability/series.js"
import { dedupKeyOf, sha256hex, signsBody } from "../providers/ProviderAdapter.js"
import { verificationEffect, type WebhookRequest } from "../providers/ProviderDefinition.js"
import { ProviderRegistry, type WebhookEndpoint } from "../providers/ProviderRegistry.js"
import type { SignatureRejection, Verified } from "../providers/signatures.js"
import type { StorageUnavailable } from "../schema/errors.js"
import { CallbackInbox, type InboxEntry } from "./CallbackInbox.js"
import { jsonDepthExceeds } from "./jsonDepth.js"

export const WebhookSettings = S.area("Webhook gateway", "receiving provider callbacks at /webhooks/{provider}", {
  maxBytes: S.integer("WEBHOOK_MAX_BYTES", "largest callback body accepted (413 above)", 256 * 1024, { min: 1 }),
  readTimeout: S.duration(
    "WEBHOOK_READ_TIMEOUT",
    "how long a callback body may take to arrive, from its headers to its last byte (408 and the connection closed)",
    "10 seconds"
  ),
  // JSON.stringify overflowed the stack on 4,500 levels of `[`; no provider nests more than a handful
  maxDepth: S.integer(
    "WEBHOOK_MAX_DEPTH",
    "deepest nesting of arrays and objects accepted in a callback body (400 deeper)",
    64,
    { min: 1, max: 1000 }
  )
})

/** The gateway's answer: a status, and a short reason for the 4xx a sender can act on (none for signatures). */
export interface WebhookAnswer {
  readonly status: number
  readonly error?: string
}

/** A request the gateway will read the body of: its provider has an endpoint here. */
export interface Admitted {
  readonly provider: string
  readonly endpoint: WebhookEndpoint
}

export const WEBHOOK_PREFIX = "/webhooks/"
const WEBHOOK_PATH = /^\/webhooks\/([a-z][a-z0-9_-]{0,31})\/?$/

const refusals = Metric.counter("webhook_refusals", {
  description: "provider callbacks refused, by status and provider"
})

const persistSeconds = seriesBy(webhookPersistSeconds, "provider")
const callbacks = seriesBy(webhookCallbacks, "provider", "outcome")
const lagSeconds = seriesBy(callbackLagSeconds, "provider")

/** A callback is in the inbox: how long that took, whether it was new, and how late it came (seed 19.7.8). */
const recordPersisted = (
  provider: string,
  outcome: "stored" | "duplicate",
  started: number,
  now: number,
  occurredAt: Date | null
) => {
  persistSeconds(provider).unsafeUpdate((now - started) / 1000, [])
  callbacks(provider, outcome).unsafeUpdate(1, [])
  // a duplicate's lag is the provider's retry schedule, not ours; a clock ahead of ours counts as no lag
  if (outcome === "stored" && occurredAt !== null) {
    lagSeconds(provider).unsafeUpdate(Math.max(0, now - occurredAt.getTime()) / 1000, [])
  }
}

/** What a verified (or refused) callback comes to, decided at once: a refusal, or the inbox row to write. */
type Decision =
  | {
    readonly _tag: "Refuse"
    readonly status: number
    readonly reason: string
    readonly error?: string
    /** the signature's rejection, counted as a verification failure */
    readonly rejection?: SignatureRejection
  }
  | {
    readonly _tag: "Store"
    readonly entry: InboxEntry
    /** an unsigned callback URL's attempt must still be open (a query first) */
    readonly checkAttempt: boolean
  }

const refuse = (status: number, reason: string, error?: string, rejection?: SignatureRejection): Decision => ({
  _tag: "Refuse",
  status,
  reason,
  ...(error === undefined ? {} : { error }),
  ...(rejection === undefined ? {} : { rejection })
})

/**
 * POST /webhooks/{provider}: verify the raw bytes, persist to the inbox, answer. Fast and dumb: no provider
 * work and no task work happens here. 204 only after the row (or its earlier duplicate) is committed;
 * 401 with no detail for any signature or URL-token problem; 400 for a body that is not the provider's format (or
 * nested deeper than WEBHOOK_MAX_DEPTH); 404 for an unknown provider; 410 for a callback URL whose token has expired;
 * 413 above the size limit; 415 for a non-JSON body; 503 when PostgreSQL is down or a signature cannot be checked.
 * Reading the body (its size and time limits) is the route's: src/http/WebhookRoute.ts.
 */
export class WebhookGateway extends Effect.Service<WebhookGateway>()("WebhookGateway", {
  effect: Effect.gen(function*() {
    const registry = yield* ProviderRegistry
    const inbox = yield* CallbackInbox
    const { maxDepth } = yield* WebhookSettings.config

    /** Counts and logs a refusal: the sender's problem, or an attack, that an operator may want to see. */
    const refused = (provider: string, status: number, reason: string, error?: string) =>
      Effect.logWarning("webhook refused").pipe(
        Effect.annotateLogs({ provider, status, reason }),
        Effect.zipRight(
          Metric.increment(Metric.tagged(Metric.tagged(refusals, "status", String(status)), "provider", provider))
        ),
        Effect.as<WebhookAnswer>(error === undefined ? { status } : { status, error })
      )

    /** What can be answered before the body is read: the path, method and media type. */
    const admit = (
      path: string,
      method: string,
      headers: Readonly<Record<string, string | undefined>>
    ): Either.Either<Admitted, WebhookAnswer> => {
      const provider = WEBHOOK_PATH.exec(path)?.[1]
      if (provider === undefined) return Either.left({ status: 404, error: "unknown provider" })
      if (method !== "POST") return Either.left({ status: 405, error: "POST only" })
      const endpoint = registry.webhookEndpoint(provider)
      if (Option.isNone(endpoint)) return Either.left({ status: 404, error: "unknown provider" })
      if (!/^application\/json\s*(;|$)/i.test(headers["content-type"] ?? "")) {
        return Either.left({ status: 415, error: "expected application/json" })
      }
      return Either.right({ provider, endpoint: endpoint.value })
    }

    /**
     * The verification's outcome and the body: a refusal, or the row to store. Plain code, no I/O: the common
     * callback (signature checked at once, nothing to look up) is stored with no fiber of its own (`receive`).
     */
    const decide = (
      { endpoint, provider }: Admitted,
      request: WebhookRequest,
      verified: Either.Either<Verified, SignatureRejection>,
      traceId: string
    ): Decision => {
      if (Either.isLeft(verified)) {
        const reason = verified.left
        return reason === "expired"
          ? refuse(410, reason, "this callback URL is no longer in use", reason)
          : reason === "keys_unavailable"
          ? refuse(503, reason, "signing keys unavailable: retry later", reason)
          : refuse(401, reason, undefined, reason)
      }
      const text = Buffer.from(request.body.buffer, request.body.byteOffset, request.body.byteLength).toString("utf8")
      // checked before anything walks the parsed value: a deep one overflowed the stack on the inbox's write
      if (jsonDepthExceeds(text, maxDepth)) {
        return refuse(400, "too_deep", `malformed ${provider} webhook: nested deeper than ${maxDepth}`)
      }
      const report = Either.flatMap(
        Either.try({ try: () => JSON.parse(text) as unknown, catch: () => "not JSON" }),
        endpoint.protocol.parse
      )
      if (Either.isLeft(report)) return refuse(400, "malformed", `malformed ${provider} webhook: ${report.left}`)
      // a signature over a request id (fal) covers only the body that names the same request
      const subject = verified.right.subject
      if (subject !== undefined && subject !== report.right.providerTaskId) return refuse(401, "subject_mismatch")
      // the attempt a verified URL token names (Luma's, Replicate's, fal's): the inbox maps the callback to it
      const attemptId = verified.right.attemptId ?? null
      const payloadHash = sha256hex(request.body)
      return {
        _tag: "Store",
        entry: {
          provider,
          dedupKey: dedupKeyOf(verified.right.eventId, report.right, payloadHash),
          providerEventId: verified.right.eventId,
          providerTaskId: report.right.providerTaskId,
          clientRequestId: report.right.clientRequestId,
          attemptId,
          providerOccurredAt: verified.right.timestamp ?? report.right.providerUpdatedAt,
          signatureKeyVersion: verified.right.keyVersion,
          payloadHash,
          body: text,
          traceId
        },
        // an unsigned callback URL works while its attempt can still change its task: not once it ended or was
        // replaced. A signed one's late results are genuine (the provider signed them): stored, for reconciliation.
        checkAttempt: attemptId !== null && !signsBody(endpoint.protocol.scheme)
      }
    }

    /** The answer once the row's write ended: 204 (counted), or 503 when PostgreSQL failed. */
    const afterStore = (
      provider: string,
      entry: InboxEntry,
      started: number,
      written: Effect.Effect<"stored" | "duplicate", StorageUnavailable>
    ): Effect.Effect<WebhookAnswer> =>
      Effect.matchEffect(written, {
        onFailure: () => Effect.succeed({ status: 503, error: "unavailable" }),
        onSuccess: (outcome) =>
          Effect.map(Clock.currentTimeMillis, (now): WebhookAnswer => {
            recordPersisted(provider, outcome, started, now, entry.providerOccurredAt)
            return { status: 204 }
          })
      })

    /** A decision carried out: a refusal counted and logged, or the row stored (its attempt checked first). */
    const conclude = (provider: string, decision: Decision, started: number): Effect.Effect<WebhookAnswer> =>
      Effect.gen(function*() {
        if (decision._tag === "Refuse") {
          if (decision.rejection !== undefined) {
            yield* Metric.increment(
              Metric.tagged(Metric.tagged(webhookVerifyFailures, "provider", provider), "reason", decision.rejection)
            )
          }
          return yield* refused(provider, decision.status, decision.reason, decision.error)
        }
        if (decision.checkAttempt) {
          const open = yield* Effect.either(inbox.callbackAttemptOpen(provider, decision.entry.attemptId!))
          if (Either.isLeft(open)) return { status: 503, error: "unavailable" }
          if (!open.right) {
            return yield* refused(provider, 410, "attempt_ended", "this callback URL is no longer in use")
          }
        }
        return yield* afterStore(provider, decision.entry, started, inbox.store(decision.entry))
      })

    /**
     * The body is in: verify, decode, store, then `reply` with the answer, or with the Effect that makes it (run by
     * the route, under the request's trace). A callback whose signature is checked at once and that is stored as
     * it is (the common case) runs no Effect at all: its row joins the inbox's next batch, and the answer is given
     * when that batch commits. A fiber per webhook cost more than the rest of the gateway (bench:webhooks). Refusals,
     * a verifier that must wait (fal's keys), an attempt to look up, and a failed write take the Effect.
     */
    const receive = (
      admitted: Admitted,
      request: WebhookRequest,
      traceId: string,
      reply: (answer: WebhookAnswer | Effect.Effect<WebhookAnswer>) => void
    ): void => {
      const { provider } = admitted
      const started = Date.now()
      let decision: Decision
      try {
        const verification = admitted.endpoint.verify(request, new Date(started))
        if (!Either.isEither(verification)) {
          return reply(
            Effect.flatMap(verification, (v) => conclude(provider, decide(admitted, request, v, traceId), started))
          )
        }
        decision = decide(admitted, request, verification, traceId)
      } catch (defect) {
        // plain code has no fiber to catch a throw: it becomes the Effect's defect (logged, answered 500), as it was
        return reply(Effect.die(defect))
      }
      if (decision._tag === "Refuse" || decision.checkAttempt) return reply(conclude(provider, decision, started))
      const entry = decision.entry
      inbox.offer(entry, (exit) => {
        if (Exit.isSuccess(exit)) {
          if (Either.isLeft(exit.value)) return reply(afterStore(provider, entry, started, inbox.settle(exit.value)))
          recordPersisted(provider, exit.value.right, started, Date.now(), entry.providerOccurredAt)
          return reply({ status: 204 })
        }
        // the runner is stopping (the batch interrupted): PostgreSQL may not have the row, the provider retries;
        // anything else (a defect of the batch) is logged and answered 500, as on the Effect path
        reply(Exit.isInterrupted(exit) ? { status: 503, error: "unavailable" } : Effect.failCause(exit.cause))
      })
    }

    /** `receive` as one Effect: for a request whose trace is sampled (its span covers the whole work). */
    const handle = (admitted: Admitted, request: WebhookRequest, traceId: string): Effect.Effect<WebhookAnswer> =>
      Effect.gen(function*() {
        const started = yield* Clock.currentTimeMillis
        const verified = yield* verificationEffect(admitted.endpoint.verify(request, new Date(started)))
        return yield* conclude(admitted.provider, decide(admitted, request, verified, traceId), started)
      })

    return { admit, receive, handle, refused } as const
  })
}) {}
