import { HttpApiMiddleware, HttpApiSecurity, HttpServerRequest } from "@effect/platform"
import { Context, Effect, Layer, Option, Redacted, Schema } from "effect"
import * as jose from "jose"
import * as S from "../config/Settings.js"
import { Unauthorized } from "../schema/errors.js"
import { ProjectId, TenantId, UserId } from "../schema/ids.js"

export const AuthSettings = S.area("Auth", "bearer tokens, session cookies and browser origins", {
  // a failed check names the variable (refine): "AUTH_SECRET: must be at least 32 characters"
  secret: S.refine(
    S.secret(
      "AUTH_SECRET",
      "HS256 key of bearer and stream tokens, at least 32 characters; unset: a development secret (warned)"
    ),
    "must be at least 32 characters",
    (s) => Option.isNone(s) || Redacted.value(s.value).length >= 32
  ),
  allowedOrigins: S.list(
    "ALLOWED_ORIGINS",
    "comma-separated browser origins allowed to use a session cookie or open a stream; unset: the runner's own origin",
    []
  )
})

/** Who is calling: a tenant, the projects the token is scoped to ("*" = every project of the tenant), a user. */
export class Principal extends Context.Tag("Principal")<Principal, {
  readonly tenantId: TenantId
  readonly userId: UserId
  readonly projects: ReadonlyArray<ProjectId> | "*"
}>() {}

export const canSee = (principal: Principal["Type"], projectId: ProjectId): boolean =>
  principal.projects === "*" || principal.projects.includes(projectId)

const Claims = Schema.Struct({
  tenant_id: TenantId,
  sub: UserId,
  projects: Schema.Union(Schema.Literal("*"), Schema.Array(ProjectId))
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

const ISSUER = "task-control-plane"

/** A single-use stream token's claims: one project, one user, one minute. */
const StreamClaims = Schema.Struct({
  typ: Schema.Literal("stream"),
  tenant_id: TenantId,
  sub: UserId,
  project: ProjectId,
  jti: Schema.UUID,
  exp: Schema.Number
})

/** Signs and verifies HS256 bearer tokens with the server secret (AUTH_SECRET). */
export class TokenSigner extends Effect.Service<TokenSigner>()("TokenSigner", {
  effect: Effect.gen(function*() {
    const { secret } = yield* AuthSettings.config
    const key = new TextEncoder().encode(
      Option.match(secret, {
        onNone: () => "development-secret-change-me-please-000000",
        onSome: Redacted.value
      })
    )
    if (Option.isNone(secret)) yield* Effect.logWarning("AUTH_SECRET is unset: using the development secret")
    /** Development mode (no AUTH_SECRET): the live page may sign itself in as the development tenant. */
    const development = Option.isNone(secret)

    /** Signs `claims` for `subject`, valid `ttlSeconds`; stream tokens also get an id (`jti`) to be spent once. */
    const signJwt = (claims: jose.JWTPayload, subject: string, ttlSeconds: number, withId: boolean) => {
      const jwt = new jose.SignJWT(claims).setProtectedHeader({ alg: "HS256" }).setSubject(subject).setIssuer(ISSUER)
      if (withId) jwt.setJti(crypto.randomUUID())
      return Effect.promise(() => jwt.setIssuedAt().setExpirationTime(`${ttlSeconds}s`).sign(key))
    }

    /** Verifies signature, issuer and expiry, then decodes the claims with `schema`; any failure is 401. */
    const verifyJwt = <A, I>(token: string, schema: Schema.Schema<A, I>, message: string) =>
      Effect.tryPromise({
        try: () => jose.jwtVerify(token, key, { issuer: ISSUER, algorithms: ["HS256"] }),
        catch: () => new Unauthorized({ message })
      }).pipe(
        Effect.flatMap(({ payload }) => Schema.decodeUnknown(schema)(payload)),
        Effect.mapError(() => new Unauthorized({ message }))
      )

    const sign = (claims: typeof Claims.Type, ttlSeconds = 3600) =>
      signJwt({ tenant_id: claims.tenant_id, projects: claims.projects }, claims.sub, ttlSeconds, false)

    const verify = (token: string) =>
      Effect.map(
        verifyJwt(token, Claims, "invalid or expired token"),
        (c) => ({ tenantId: c.tenant_id, userId: c.sub, projects: c.projects })
      )

    /** A short-lived, single-use token for one project's event stream (EventSource cannot send headers). */
    const signStream = (principal: Principal["Type"], projectId: ProjectId, ttlSeconds: number) =>
      signJwt({ typ: "stream", tenant_id: principal.tenantId, project: projectId }, principal.userId, ttlSeconds, true)

    const verifyStream = (token: string) => verifyJwt(token, StreamClaims, "invalid or expired stream token")

    return { sign, verify, signStream, verifyStream, development } as const
  })
}) {}

/**
 * Which browser origins may use a session cookie or open a stream: ALLOWED_ORIGINS (comma-separated), or by
 * default the runner's own origin (the Origin's host equals the request's Host).
 */
export class OriginPolicy extends Effect.Service<OriginPolicy>()("OriginPolicy", {
  effect: Effect.gen(function*() {
    const { allowedOrigins: listed } = yield* AuthSettings.config
    const allowed = new Set(listed.map((o) => o.trim().replace(/\/$/, "")).filter((o) => o.length > 0))
    /** An absent Origin is a same-origin GET or a non-browser client: the credential decides alone. */
    const accepts = (origin: string | undefined, host: string | undefined): boolean => {
      if (origin === undefined) return true
      if (allowed.size > 0) return allowed.has(origin)
      try {
        return host !== undefined && new URL(origin).host === host
      } catch {
        return false
      }
    }
    return { accepts } as const
  })
}) {}

export const AuthenticationLive = Layer.effect(
  Authentication,
  Effect.gen(function*() {
    const signer = yield* TokenSigner
    const origins = yield* OriginPolicy
    return {
      bearer: (token: Redacted.Redacted<string>) => signer.verify(Redacted.value(token)),
      cookie: (token: Redacted.Redacted<string>) =>
        Effect.gen(function*() {
          const request = yield* HttpServerRequest.HttpServerRequest
          if (!origins.accepts(request.headers["origin"], request.headers["host"])) {
            return yield* new Unauthorized({ message: "cross-origin request with a session cookie" })
          }
          return yield* signer.verify(Redacted.value(token))
        })
    }
  })
)
