import type * as HttpClient from "@effect/platform/HttpClient"
import type * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import { Config, type Duration, Effect, Either, type Option } from "effect"
import type { Setting } from "../config/Settings.js"
import type { HostPattern } from "../output/hostPatterns.js"
import type { LookupUnsupported, ProviderCallFailed, SubmitRejected, SubmitUnknown } from "./errors.js"
import type { ProviderReport, WebhookProtocol } from "./ProviderAdapter.js"
import type { SignatureRejection, Verified, VersionedSecret } from "./signatures.js"
import type { Transport } from "./transport.js"

export type Resolution = "480p" | "720p" | "1080p"

export interface SubmitRequest {
  readonly attemptId: string
  /** Sent as the Idempotency-Key: the same key is never used for two generations. */
  readonly clientRequestId: string
  readonly model: string
  readonly prompt: string
  readonly durationSeconds: number
  readonly resolution: Resolution
}

/** What a definition's client does; the platform adds lookup and defaults around it. */
export interface ClientCore {
  readonly submit: (
    r: SubmitRequest
  ) => Effect.Effect<{ readonly providerTaskId: string }, SubmitRejected | SubmitUnknown>
  readonly query: (providerTaskId: string, model: string) => Effect.Effect<ProviderReport, ProviderCallFailed>
  readonly cancel: (providerTaskId: string, model: string) => Effect.Effect<void, ProviderCallFailed>
  /** An output reference this provider serves itself, with our credentials (OpenAI's /content). */
  readonly outputRequest?: (ref: string) => Option.Option<HttpClientRequest.HttpClientRequest>
  /** Lookup by our idempotency key, where the provider has one (none of today's six does). */
  readonly lookup?: (clientRequestId: string) => Effect.Effect<Option.Option<string>, ProviderCallFailed>
}

/** Submit, query and cancel for one provider, normalized into ProviderReport and classified errors. */
export interface ProviderClient {
  readonly submit: ClientCore["submit"]
  readonly query: ClientCore["query"]
  readonly cancel: ClientCore["cancel"]
  /**
   * Which job (if any) the provider holds for our idempotency key: how an unknown submit is resolved without
   * ever submitting twice. None means the provider confirms it has nothing.
   */
  readonly lookup: (
    clientRequestId: string
  ) => Effect.Effect<Option.Option<string>, ProviderCallFailed | LookupUnsupported>
  /** How to download one output reference (None: a location this client cannot fetch, e.g. gs://). */
  readonly outputRequest: (ref: string) => Option.Option<HttpClientRequest.HttpClientRequest>
  /** Where its outputs may be downloaded from, redirects included (<NAME>_OUTPUT_HOSTS). */
  readonly outputHosts: ReadonlyArray<HostPattern>
}

/** What every client is built with: its transport (base URL, credentials, timeout) and our callback address. */
export interface ClientContext {
  readonly transport: Transport
  /** `${PUBLIC_BASE_URL}/webhooks/<name>` */
  readonly webhookUrl: string
  /**
   * The callback URL of one attempt, for providers that take a webhook URL per request (Replicate, fal, Luma):
   * `webhookUrl?attempt=<id>&issued=<unix seconds>&token=<HMAC>`. The token says which attempt the callback is
   * about, so a callback for a job whose submit response was lost still finds its attempt (and, for unsigned
   * callbacks, it is the only proof of the sender). Without CALLBACK_TOKEN_SECRET the bare `webhookUrl`.
   */
  readonly callbackUrl: (attemptId: string) => Effect.Effect<string>
}

/** What a webhook verifier is built with: the shared tolerance and the callback-token secrets and lifetime. */
export interface WebhookContext {
  readonly toleranceSeconds: number
  readonly callbackTokens: ReadonlyArray<VersionedSecret>
  /**
   * Which of its secrets a verifier may use (each passes them through this): the simulator's development secrets are
   * dropped unless this provider's base URL is on this machine (ProviderRegistry). None left: no endpoint (404).
   */
  readonly usable: (secrets: ReadonlyArray<VersionedSecret>) => ReadonlyArray<VersionedSecret>
  readonly callbackTokenTtl: Duration.Duration
}

/** What the webhook gateway sees of a request: enough to verify it, nothing parsed yet. */
export interface WebhookRequest {
  readonly headers: Readonly<Record<string, string | undefined>>
  readonly query: URLSearchParams
  readonly body: Uint8Array
}

/**
 * A verifier's answer: at once (a signature checked against configured secrets), or an Effect when it must wait
 * for something (fal's signing keys, fetched and cached). The gateway stores a callback answered at once without a
 * fiber of its own (src/intake/Webhooks.ts).
 */
export type Verification =
  | Either.Either<Verified, SignatureRejection>
  | Effect.Effect<Either.Either<Verified, SignatureRejection>>

/** Verifies a request received at `now`. */
export type Verify = (request: WebhookRequest, now: Date) => Verification

/** A verification as an Effect, whichever way it came (an Either is itself an Effect, one that fails on Left). */
export const verificationEffect = (v: Verification): Effect.Effect<Either.Either<Verified, SignatureRejection>> =>
  Either.isEither(v) ? Effect.succeed(v) : v

/** The verification `f` makes of a signature's, at once when the signature's was, else once it is. */
export const mapVerification = (
  v: Verification,
  f: (signed: Either.Either<Verified, SignatureRejection>) => Either.Either<Verified, SignatureRejection>
): Verification => Either.isEither(v) ? f(v) : Effect.map(v, f)

export interface WebhookDefinition {
  readonly protocol: WebhookProtocol
  /**
   * The verifier, from this provider's own settings (its secrets): None when they are not configured, and then the
   * provider has no webhook endpoint (404).
   */
  readonly verifier: Setting<
    (context: WebhookContext) => Option.Option<Effect.Effect<Verify, never, HttpClient.HttpClient>>
  >
}

/**
 * Everything the platform knows about one provider. Each provider file exports one; `providers.ts` lists them.
 * Request bodies and response schemas are typed against the provider's official SDK in its file.
 */
export interface ProviderDefinition {
  /** As in task rows, `/webhooks/<name>` and the `<NAME>_*` settings. */
  readonly name: string
  readonly title: string
  readonly defaultBaseUrl: string
  /**
   * The hosts its output URLs are on (`*.suffix` for subdomains): outputs are downloaded from these only, and an
   * output URL elsewhere is refused. <NAME>_OUTPUT_HOSTS replaces the list.
   */
  readonly outputHosts: ReadonlyArray<string>
  /** A model this definition accepts (the tests and the simulator's examples use it). */
  readonly exampleModel: string
  /** How the API key is presented (`Authorization: Bearer …`, fal's `Key …`). */
  readonly authHeaders: (apiKey: string) => Record<string, string>
  /** Sent with every request (Runway's X-Runway-Version). */
  readonly headers?: Record<string, string>
  /**
   * Whether this request can be sent at all (a known model, a duration the provider offers): Left(reason) is
   * refused before any call, as the provider would refuse it.
   */
  readonly check: (r: { readonly model: string; readonly durationSeconds: number }) => Either.Either<void, string>
  /** The client, from this provider's own settings beyond base URL, key and lookup (Veo's project). */
  readonly client: Setting<(context: ClientContext) => ClientCore>
  readonly webhook?: WebhookDefinition
}

/** A provider with no settings of its own. */
export const constant = <A>(value: A): Setting<A> => ({ config: Config.succeed(value), docs: [] })
