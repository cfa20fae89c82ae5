import * as HttpApiMiddleware from "@effect/platform/HttpApiMiddleware"
import * as HttpApiSecurity from "@effect/platform/HttpApiSecurity"
import { Clock, Context, Duration, Effect, Metric, Option, Redacted, Schema } from "effect"
import * as jose from "jose"
import * as S from "../config/Settings.js"
import { seriesBy } from "../observability/series.js"
import { ProviderSettings } from "../providers/ProviderSettings.js"
import { Unauthorized } from "../schema/errors.js"
import { ProjectId, TenantId, UserId } from "../schema/ids.js"

export const AuthSettings = S.area("Auth", "bearer tokens, session cookies and browser origins", {
  // a failed check names the variable (refine): "AUTH_SECRET: must be at least 32 characters"
  secret: S.refine(
    S.secret(
      "AUTH_SECRET",
      "HS256 key of bearer and stream tokens, at least 32 characters; unset: development mode (a development secret, warned), and HTTP_HOST must be loopback"
    ),
    "must be at least 32 characters",
    (s) => Option.isNone(s) || Redacted.value(s.value).length >= 32
  ),
  // bounded: a token's lifetime is its exp; a tolerance of minutes would make a one-minute stream token live for them
  clockSkew: S.refine(
    S.duration(
      "AUTH_CLOCK_SKEW",
      "how far a token's iat/nbf may lie in the future, and its exp in the past (signer and runner clocks differ); at most 5 minutes",
      "30 seconds"
    ),
    "must be at most 5 minutes",
    (d) => Duration.lessThanOrEqualTo(d, Duration.minutes(5))
  ),
  revocationRefresh: S.duration(
    "TOKEN_REVOCATION_REFRESH",
    "how often each runner re-reads the token denylist, the safety net of the push (PostgreSQL NOTIFY) that tells it at once",
    "5 seconds"
  ),
  allowedOrigins: S.list(
    "ALLOWED_ORIGINS",
    "comma-separated browser origins (scheme://host[:port]) allowed to use a session cookie or open a stream; unset: the runner's own origin (PUBLIC_BASE_URL's scheme, the request's host)",
    []
  )
})

/**
 * The access token a caller holds, as far as revocation needs it: its id (`jti`; null for a token signed before
 * access tokens had one: only `revoke --user` reaches those) and when it was issued (seconds since the epoch).
 */
export interface Credential {
  readonly tokenId: string | null
  readonly issuedAt: number
}

/** Who is calling: a tenant, the projects the token is scoped to ("*" = every project of the tenant), a user. */
export class Principal extends Context.Tag("Principal")<Principal, {
  readonly tenantId: TenantId
  readonly userId: UserId
  readonly projects: ReadonlyArray<ProjectId> | "*"
  readonly credential: Credential
}>() {}

export const canSee = (principal: Principal["Type"], projectId: ProjectId): boolean =>
  principal.projects === "*" || principal.projects.includes(projectId)

/** An access token's claims (besides iss, aud, iat, exp). */
const Claims = Schema.Struct({
  tenant_id: TenantId,
  sub: UserId,
  projects: Schema.Union(Schema.Literal("*"), Schema.Array(ProjectId)),
  jti: Schema.optional(Schema.UUID),
  iat: Schema.Number,
  exp: Schema.Number
})

/** The browser session: the access token in an HttpOnly, SameSite=Strict cookie (never readable by scripts). */
export const SESSION_COOKIE = "tcp_session"

/**
 * Bearer for backends; the session cookie for browsers. A cookie rides along with any request the browser
 * makes, so a cookie-authenticated request must also come from an allowed Origin (CSRF, seed 12.13.3).
 */
export class Authentication extends HttpApiMiddleware.Tag<Authentication>()("Authentication", {
  failure: Unauthorized,
  provides: Principal,
  security: {
    bearer: HttpApiSecurity.bearer,
    cookie: HttpApiSecurity.apiKey({ in: "cookie", key: SESSION_COOKIE })
  }
}) {}

export const ISSUER = "task-control-plane"

/**
 * What a token is for, told by its JOSE `typ` header and its audience, never by which claims it happens to carry: an
 * access token (bearer, session cookie) is refused as a stream token and a stream token as an access token, whatever
 * claims either has. Exported for programs that mint their own (bench/sse.ts) and for tests of the checks.
 */
export const TokenKinds = {
  access: { typ: "at+jwt", audience: "task-control-plane:api" },
  stream: { typ: "stream+jwt", audience: "task-control-plane:stream" },
  /** An operator's: the admin API and the operator page only, never a tenant's API (and the reverse). */
  operator: { typ: "ops+jwt", audience: "task-control-plane:ops" }
} as const
type TokenKind = keyof typeof TokenKinds

/**
 * A single-use stream token's claims: one project, one user, one minute; `sid` and `siat` name the access token it was
 * issued to (its id and issue time), so revoking that token also closes the streams it opened this way.
 */
const StreamClaims = Schema.Struct({
  tenant_id: TenantId,
  sub: UserId,
  project: ProjectId,
  jti: Schema.UUID,
  exp: Schema.Number,
  iat: Schema.Number,
  sid: Schema.optional(Schema.UUID),
  siat: Schema.optional(Schema.Number)
})

/** An operator token's claims: who the operator is. */
const OperatorClaims = Schema.Struct({ sub: Schema.NonEmptyTrimmedString })

/** Every token names its subject, when it was issued and when it expires: one without an expiry is refused. */
const REQUIRED_CLAIMS = ["sub", "iat", "exp"]

/** Tokens refused, by kind and reason (the failed claim, or jose's code: signature, malformed …, revoked). */
export const tokensRefused = Metric.counter("auth_tokens_refused", {
  description: "bearer, cookie and stream tokens refused"
})

/** Access tokens accepted, by whether this runner had already verified the same token (cache: hit or miss). */
const accessTokensAccepted = seriesBy(
  Metric.counter("auth_access_tokens_accepted", {
    description: "bearer and cookie tokens accepted, by whether this runner had verified the same token before"
  }),
  "cache"
)

/**
 * How many verified access tokens a runner keeps. A client sends the same token with every request until it
 * expires; checking its HMAC again cost ~0.4 ms of CPU per API request (jose, Web Crypto; bench:handoff's profile,
 * a tenth of a task read). Only the exact token string hits, so a changed signature or claim is verified afresh;
 * revocation is looked at on every request all the same (AuthenticationLive.refuseRevoked).
 */
const VERIFIED_ACCESS_TOKENS = 10_000

const refusalReason = (e: unknown): string =>
  e instanceof jose.errors.JWTClaimValidationFailed
    ? `claim_${e.claim}`
    : e instanceof jose.errors.JWTExpired
    ? "expired"
    : e instanceof jose.errors.JOSEError
    ? e.code
    : "malformed"

/** Signs and verifies HS256 bearer tokens with the server secret (AUTH_SECRET). */
export class TokenSigner extends Effect.Service<TokenSigner>()("TokenSigner", {
  effect: Effect.gen(function*() {
    const { clockSkew, secret } = yield* AuthSettings.config
    const key = new TextEncoder().encode(
      Option.match(secret, {
        onNone: () => "development-secret-change-me-please-000000",
        onSome: Redacted.value
      })
    )
    /** Development mode (no AUTH_SECRET): the live page may sign itself in as the development tenant. */
    const development = Option.isNone(secret)
    const skewSeconds = Math.floor(Duration.toSeconds(clockSkew))

    /**
     * Signs `claims` for `subject`, valid `ttlSeconds`. Stream tokens get an id (`jti`) to be spent once, access
     * tokens one to be revoked by (the denylist: src/http/Revocations.ts).
     */
    const signJwt = (kind: TokenKind, claims: jose.JWTPayload, subject: string, ttlSeconds: number) =>
      Effect.flatMap(Clock.currentTimeMillis, (ms) => {
        const now = Math.floor(ms / 1000)
        const jwt = new jose.SignJWT(claims)
          .setProtectedHeader({ alg: "HS256", typ: TokenKinds[kind].typ })
          .setSubject(subject)
          .setIssuer(ISSUER)
          .setAudience(TokenKinds[kind].audience)
          .setIssuedAt(now)
          .setExpirationTime(now + ttlSeconds)
        if (kind === "stream" || kind === "access") jwt.setJti(crypto.randomUUID())
        return Effect.promise(() => jwt.sign(key))
      })

    /**
     * Verifies signature, kind (typ and audience), issuer, the required claims, expiry and not-before (each within
     * AUTH_CLOCK_SKEW), that it was not issued in the future (jose checks `iat` only against a maximum age), then
     * decodes the claims with `schema`; any failure is 401.
     */
    const verifyJwt = <A, I>(kind: TokenKind, token: string, schema: Schema.Schema<A, I>, message: string) =>
      Effect.gen(function*() {
        const now = new Date(yield* Clock.currentTimeMillis)
        const refused = (reason: string) =>
          Effect.logDebug("token refused").pipe(
            Effect.annotateLogs({ token_kind: kind, reason }),
            Effect.zipRight(
              Metric.increment(Metric.tagged(Metric.tagged(tokensRefused, "kind", kind), "reason", reason))
            ),
            Effect.zipRight(Effect.fail(new Unauthorized({ message })))
          )
        const verified = yield* Effect.tryPromise(() =>
          jose.jwtVerify(token, key, {
            issuer: ISSUER,
            audience: TokenKinds[kind].audience,
            typ: TokenKinds[kind].typ,
            algorithms: ["HS256"],
            requiredClaims: REQUIRED_CLAIMS,
            clockTolerance: skewSeconds,
            currentDate: now
          })
        ).pipe(Effect.catchAll((e) => refused(refusalReason(e.error))))
        if (verified.payload.iat! > now.getTime() / 1000 + skewSeconds) return yield* refused("claim_iat")
        return yield* Schema.decodeUnknown(schema)(verified.payload).pipe(Effect.catchAll(() => refused("claims")))
      })

    const sign = (claims: Pick<typeof Claims.Type, "tenant_id" | "sub" | "projects">, ttlSeconds = 3600) =>
      signJwt("access", { tenant_id: claims.tenant_id, projects: claims.projects }, claims.sub, ttlSeconds)

    /** Verified access tokens, until their expiry plus the skew; the oldest entry goes first when full. */
    const verified = new Map<string, { readonly principal: Principal["Type"]; readonly acceptedUntilMs: number }>()
    const verifyAfresh = (token: string) =>
      Effect.map(verifyJwt("access", token, Claims, "invalid or expired token"), (c) => {
        const principal: Principal["Type"] = {
          tenantId: c.tenant_id,
          userId: c.sub,
          projects: c.projects,
          credential: { tokenId: c.jti ?? null, issuedAt: c.iat }
        }
        if (verified.size >= VERIFIED_ACCESS_TOKENS) verified.delete(verified.keys().next().value!)
        verified.set(token, { principal, acceptedUntilMs: (c.exp + skewSeconds) * 1000 })
        accessTokensAccepted("miss").unsafeUpdate(1, [])
        return principal
      })
    const verify = (token: string): Effect.Effect<Principal["Type"], Unauthorized> =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => {
        const known = verified.get(token)
        if (known === undefined) return verifyAfresh(token)
        // expired since: verified again, which refuses it with the reason counted
        if (now > known.acceptedUntilMs) {
          return Effect.zipRight(Effect.sync(() => verified.delete(token)), verifyAfresh(token))
        }
        accessTokensAccepted("hit").unsafeUpdate(1, [])
        return Effect.succeed(known.principal)
      })

    /** A short-lived, single-use token for one project's event stream (EventSource cannot send headers). */
    const signStream = (principal: Principal["Type"], projectId: ProjectId, ttlSeconds: number) =>
      signJwt(
        "stream",
        {
          tenant_id: principal.tenantId,
          project: projectId,
          siat: principal.credential.issuedAt,
          ...(principal.credential.tokenId === null ? {} : { sid: principal.credential.tokenId })
        },
        principal.userId,
        ttlSeconds
      )

    /**
     * A stream token's claims, and until when it is accepted (exp plus the skew): its spent id must be kept that long,
     * or it could be presented again once forgotten.
     */
    const verifyStream = (token: string) =>
      Effect.map(
        verifyJwt("stream", token, StreamClaims, "invalid or expired stream token"),
        (claims) => ({
          ...claims,
          acceptedUntil: new Date((claims.exp + skewSeconds) * 1000),
          // the access token it was issued to (a stream token of an older signer: its own issue time only)
          credential: { tokenId: claims.sid ?? null, issuedAt: claims.siat ?? claims.iat } satisfies Credential
        })
      )

    /** An operator token for `subject` (who acts: it is written into audit rows). */
    const signOperator = (subject: string, ttlSeconds = 3600) => signJwt("operator", {}, subject, ttlSeconds)

    const verifyOperator = (token: string) =>
      Effect.map(
        verifyJwt("operator", token, OperatorClaims, "invalid or expired operator token"),
        (c) => ({ operator: c.sub })
      )

    return { sign, verify, signStream, verifyStream, signOperator, verifyOperator, development } as const
  })
}) {}

/**
 * What browsers may do, from configuration only (never from request headers, which a client writes): which origins
 * may use a session cookie or open a stream — ALLOWED_ORIGINS (comma-separated), or by default the runner's own
 * origin, i.e. PUBLIC_BASE_URL's scheme with the request's Host (the runner may be reached under several names) — and
 * whether the session cookie is `Secure` (PUBLIC_BASE_URL is https: behind a TLS-terminating proxy the runner itself
 * sees plain HTTP). An origin is scheme, host and port: http://host and https://host are different origins.
 */
export class OriginPolicy extends Effect.Service<OriginPolicy>()("OriginPolicy", {
  effect: Effect.gen(function*() {
    const { allowedOrigins: listed } = yield* AuthSettings.config
    const { publicBaseUrl } = yield* ProviderSettings.config
    const normalized = (origin: string): string | undefined => {
      try {
        const url = new URL(origin)
        return url.origin === "null" ? undefined : url.origin
      } catch {
        return undefined
      }
    }
    const allowed = new Set(listed.flatMap((o) => normalized(o.trim()) ?? []))
    const scheme = /^https:/i.test(publicBaseUrl) ? "https:" : "http:"
    /** An absent Origin is a same-origin GET or a non-browser client: the credential decides alone. */
    const accepts = (origin: string | undefined, host: string | undefined): boolean => {
      if (origin === undefined) return true
      const given = normalized(origin)
      if (given === undefined) return false
      if (allowed.size > 0) return allowed.has(given)
      return host !== undefined && given === normalized(`${scheme}//${host}`)
    }
    return { accepts, secureCookies: scheme === "https:" } as const
  })
}) {}
