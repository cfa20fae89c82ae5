import { HttpApiMiddleware, HttpApiSecurity } from "@effect/platform"
import { Config, Context, Effect, Layer, Option, Redacted, Schema } from "effect"
import * as jose from "jose"
import { Unauthorized } from "../schema/errors.js"
import { ProjectId, TenantId, UserId } from "../schema/ids.js"

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

export class Authentication extends HttpApiMiddleware.Tag<Authentication>()("Authentication", {
  failure: Unauthorized,
  provides: Principal,
  security: { bearer: HttpApiSecurity.bearer }
}) {}

const ISSUER = "task-control-plane"

/** Signs and verifies HS256 bearer tokens with the server secret (AUTH_SECRET). */
export class TokenSigner extends Effect.Service<TokenSigner>()("TokenSigner", {
  effect: Effect.gen(function*() {
    const secret = yield* Config.redacted("AUTH_SECRET").pipe(
      Config.validate({
        message: "AUTH_SECRET must be at least 32 characters",
        validation: (s) => Redacted.value(s).length >= 32
      }),
      Config.option
    )
    const key = new TextEncoder().encode(
      Option.match(secret, {
        onNone: () => "development-secret-change-me-please-000000",
        onSome: Redacted.value
      })
    )
    if (Option.isNone(secret)) yield* Effect.logWarning("AUTH_SECRET is unset: using the development secret")

    const sign = (claims: typeof Claims.Type, ttlSeconds = 3600) =>
      Effect.promise(() =>
        new jose.SignJWT({ tenant_id: claims.tenant_id, projects: claims.projects })
          .setProtectedHeader({ alg: "HS256" })
          .setSubject(claims.sub)
          .setIssuer(ISSUER)
          .setIssuedAt()
          .setExpirationTime(`${ttlSeconds}s`)
          .sign(key)
      )

    const verify = (token: string) =>
      Effect.tryPromise({
        try: () => jose.jwtVerify(token, key, { issuer: ISSUER, algorithms: ["HS256"] }),
        catch: () => new Unauthorized({ message: "invalid or expired token" })
      }).pipe(
        Effect.flatMap(({ payload }) => Schema.decodeUnknown(Claims)(payload)),
        Effect.mapError(() => new Unauthorized({ message: "invalid or expired token" })),
        Effect.map((c) => ({ tenantId: c.tenant_id, userId: c.sub, projects: c.projects }))
      )

    return { sign, verify } as const
  })
}) {}

export const AuthenticationLive = Layer.effect(
  Authentication,
  Effect.map(TokenSigner, (signer) => ({
    bearer: (token: Redacted.Redacted<string>) => signer.verify(Redacted.value(token))
  }))
)
