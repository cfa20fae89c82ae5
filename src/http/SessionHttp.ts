import * as Cookies from "@effect/platform/Cookies"
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Effect, Option } from "effect"
import * as jose from "jose"
import { EventLog } from "../persistence/EventLog.js"
import { Projects } from "../persistence/Projects.js"
import { TokenDenylist } from "../persistence/TokenDenylist.js"
import { ProjectNotFound, Unauthorized } from "../schema/errors.js"
import type { ProjectId, TenantId, UserId } from "../schema/ids.js"
import { ControlPlaneApi } from "./Api.js"
import { canSee, OriginPolicy, Principal, SESSION_COOKIE, TokenSigner } from "./Auth.js"
import { Revocations } from "./Revocations.js"
import { SessionView, StreamToken } from "./SessionApi.js"

/** The development tenant and project the live page signs in as when no AUTH_SECRET is configured. */
export const DEV_TENANT = "00000000-0000-4000-8000-00000000d001" as TenantId
export const DEV_PROJECT = "00000000-0000-4000-8000-00000000d0a1" as ProjectId
const DEV_USER = "00000000-0000-4000-8000-00000000d0b1" as UserId

const STREAM_TOKEN_TTL = 60
const SESSION_TTL = 12 * 3600

/**
 * The session cookie: `Secure` when browsers reach the platform over https (PUBLIC_BASE_URL), never decided by the
 * request's Host header, which the client writes (a loopback Host used to turn Secure off on a public deployment).
 */
const setSession = (token: string, secure: boolean) =>
  HttpApp.appendPreResponseHandler((_req, response) =>
    Effect.orDie(HttpServerResponse.setCookie(response, SESSION_COOKIE, token, {
      httpOnly: true,
      sameSite: "strict",
      secure,
      path: "/",
      maxAge: `${SESSION_TTL} seconds`
    }))
  )

const view = (p: Principal["Type"], development: boolean) =>
  new SessionView({ tenant_id: p.tenantId, user_id: p.userId, projects: p.projects, development })

export const SessionHttpLive = HttpApiBuilder.group(ControlPlaneApi, "session", (handlers) =>
  Effect.gen(function*() {
    const signer = yield* TokenSigner
    const log = yield* EventLog
    const projects = yield* Projects
    const origins = yield* OriginPolicy
    const { secureCookies } = origins
    const denylist = yield* TokenDenylist
    const revocations = yield* Revocations

    /**
     * Logout revokes the session's access token (the cookie's, else a bearer's): every runner refuses it within
     * seconds and closes the streams it holds. Only from an allowed Origin (a cross-site page must not log a user
     * out); a token that does not verify (expired, forged) has nothing to revoke.
     */
    const revokeSession = Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      if (!origins.accepts(request.headers["origin"], request.headers["host"])) return
      const cookie = Cookies.parseHeader(request.headers["cookie"] ?? "")[SESSION_COOKIE]
      const token = cookie ?? /^Bearer (\S+)$/i.exec(request.headers["authorization"] ?? "")?.[1]
      if (token === undefined) return
      const verified = yield* Effect.option(signer.verify(token))
      if (Option.isNone(verified) || verified.value.credential.tokenId === null) return
      const { credential, userId } = verified.value
      const exp = jose.decodeJwt(token).exp
      const tokenId = credential.tokenId!
      yield* denylist.revokeToken({
        tokenId,
        expiresAt: exp === undefined ? null : new Date(exp * 1000),
        by: `logout:${userId}`,
        reason: "logout"
      })
      yield* revocations.revoked({ kind: "token", tokenId, expiresAt: null, revokedAt: new Date() }, "logout")
      yield* Effect.logInfo("session token revoked at logout").pipe(
        Effect.annotateLogs({ user_id: userId, token_id: tokenId })
      )
    }).pipe(
      // the cookie goes anyway; a database failure is logged (the token then lives until it expires)
      Effect.catchAllCause((cause) => Effect.logError("logout could not revoke the session token", cause))
    )
    return handlers
      .handle("open", () =>
        Effect.gen(function*() {
          const request = yield* HttpServerRequest.HttpServerRequest
          const bearer = /^Bearer (\S+)$/i.exec(request.headers["authorization"] ?? "")
          // authenticated by the cookie itself: the session is already there
          if (bearer !== null) yield* setSession(bearer[1]!, secureCookies)
          return view(yield* Principal, signer.development)
        }))
      .handle("current", () => Effect.map(Principal, (p) => view(p, signer.development)))
      .handle("streamToken", ({ path }) =>
        Effect.gen(function*() {
          const principal = yield* Principal
          if (!canSee(principal, path.project)) return yield* new ProjectNotFound({ projectId: path.project })
          const head = yield* log.open(principal.tenantId, path.project)
          if (Option.isNone(head)) return yield* new ProjectNotFound({ projectId: path.project })
          const token = yield* signer.signStream(principal, path.project, STREAM_TOKEN_TTL)
          return new StreamToken({ token, expires_in: STREAM_TOKEN_TTL })
        }))
      .handle("close", () =>
        Effect.zipRight(
          revokeSession,
          HttpApp.appendPreResponseHandler((_req, response) =>
            Effect.orDie(HttpServerResponse.expireCookie(response, SESSION_COOKIE, { path: "/" }))
          )
        ))
      .handle("development", () =>
        Effect.gen(function*() {
          if (!signer.development) {
            return yield* new Unauthorized({ message: "development sessions are off (AUTH_SECRET is set)" })
          }
          // the development tenant's one project: made here (its id is the code's, never a request's)
          yield* projects.ensure(DEV_TENANT, DEV_PROJECT)
          yield* setSession(
            yield* signer.sign({ tenant_id: DEV_TENANT, sub: DEV_USER, projects: [DEV_PROJECT] }, SESSION_TTL),
            secureCookies
          )
          return new SessionView({
            tenant_id: DEV_TENANT,
            user_id: DEV_USER,
            projects: [DEV_PROJECT],
            development: true
          })
        }))
  }))
