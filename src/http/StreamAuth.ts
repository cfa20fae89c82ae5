import * as Cookies from "@effect/platform/Cookies"
import { Clock, Duration, Effect, Either, Schema } from "effect"
import * as jose from "jose"
import type { IncomingMessage } from "node:http"
import type { StreamRequest } from "../gateway/EventGateway.js"
import { EventLog } from "../persistence/EventLog.js"
import { EventCursorFromString } from "../schema/cursor.js"
import { ProjectId, TaskId } from "../schema/ids.js"
import { AuthSettings, canSee, OriginPolicy, type Principal, SESSION_COOKIE, TokenSigner } from "./Auth.js"
import { refuseRevoked } from "./AuthenticationLive.js"
import { type Holder, Revocations } from "./Revocations.js"

/** Why a stream was not opened; the status is the HTTP answer (SSE) or the close reason (WebSocket). */
export class StreamRefused extends Schema.TaggedError<StreamRefused>()("StreamRefused", {
  status: Schema.Number,
  message: Schema.String,
  retryAfterSeconds: Schema.optional(Schema.Number)
}) {}

/** `/v1/projects/{project}/events` (SSE) and `/v1/projects/{project}/events/ws` (WebSocket). */
export const EVENTS_PATH = /^\/v1\/projects\/([^/]+)\/events(\/ws)?$/

const decodeProject = Schema.decodeUnknownEither(ProjectId)
const decodeTask = Schema.decodeUnknownEither(TaskId)
const decodeCursor = Schema.decodeUnknownEither(EventCursorFromString)

const refuse = (status: number, message: string) => new StreamRefused({ status, message })

/**
 * Access tokens (bearer, session cookie) this runner verified, kept until they expire: a reconnect storm brings the
 * same few tokens thousands of times, and verifying one (jose over WebCrypto HMAC) measured 0.6 ms of CPU, a third
 * of the 2 ms an open may cost. Bounded; the oldest goes first.
 */
const VERIFIED_TOKENS = 10_000

/**
 * Authenticates and decodes stream requests (both transports): Origin first (a cross-site page must not ride on the
 * browser's cookie), then a bearer token, a single-use stream token (`?stream_token=`, bound to one project, spent on
 * first use on any runner) or the session cookie, then the project (another tenant's project, or one the token does
 * not name, is 404), the cursor (`Last-Event-ID`, `?after=`, `?last_event_id=`) and the optional `?task_id=` filter.
 * Long-lived tokens are never taken from the URL. An access token's signature is verified once: later opens with it
 * check only its expiry (within AUTH_CLOCK_SKEW), and one that expired meanwhile is verified again, so refused. A
 * refused token is not remembered (each try is verified, and counted in auth_tokens_refused). A revoked token
 * (Revocations.ts) is refused, and dropped from the verified ones. No span: it runs once per stream open.
 */
export const makeStreamAuth = Effect.gen(function*() {
  const signer = yield* TokenSigner
  const origins = yield* OriginPolicy
  const log = yield* EventLog
  const revocations = yield* Revocations
  const skewMs = Duration.toMillis((yield* AuthSettings.config).clockSkew)
  const verified = new Map<string, { readonly principal: Principal["Type"]; readonly expiresAt: number }>()

  const verifyAccess = (token: string) =>
    Effect.flatMap(Clock.currentTimeMillis, (now) => {
      const known = verified.get(token)
      if (known !== undefined && revocations.isRevoked(known.principal)) {
        // revoked since it was verified: forgotten, and refused from now on
        verified.delete(token)
        return refuseRevoked(revocations, known.principal)
      }
      if (known !== undefined && now <= known.expiresAt + skewMs) return Effect.succeed(known.principal)
      verified.delete(token) // expired: the signer refuses it (and counts why)
      return Effect.tap(Effect.flatMap(signer.verify(token), (p) => refuseRevoked(revocations, p)), (principal) =>
        Effect.sync(() => {
          // the signature is verified: its claims can be read as they are (exp is required)
          const exp = jose.decodeJwt(token).exp
          if (exp === undefined) {
            return
          }
          if (verified.size >= VERIFIED_TOKENS) {
            verified.delete(verified.keys().next().value!)
          }
          verified.set(token, { principal, expiresAt: exp * 1000 })
        }))
    })

  const authorize = (request: IncomingMessage, url: URL) =>
    Effect.gen(function*() {
      if (!origins.accepts(request.headers.origin, request.headers.host)) {
        return yield* refuse(403, "this origin may not open streams")
      }
      const match = EVENTS_PATH.exec(url.pathname)
      const projectId = decodeProject(match?.[1] ?? "")
      if (Either.isLeft(projectId)) return yield* refuse(404, "project not found")

      const authorization = request.headers.authorization
      const streamToken = url.searchParams.get("stream_token")
      const cookieHeader = request.headers.cookie
      const cookie = cookieHeader === undefined ? undefined : Cookies.parseHeader(cookieHeader)[SESSION_COOKIE]
      const unauthorized = () => refuse(401, "missing or invalid credentials")
      let principal: Principal["Type"]
      if (authorization !== undefined) {
        const bearer = /^Bearer (\S+)$/i.exec(authorization)
        if (bearer === null) return yield* unauthorized()
        principal = yield* Effect.mapError(verifyAccess(bearer[1]!), unauthorized)
      } else if (streamToken !== null) {
        const claims = yield* Effect.mapError(signer.verifyStream(streamToken), unauthorized)
        if (claims.project !== projectId.right) return yield* refuse(404, "project not found")
        const fresh = yield* log.spendToken(claims.jti, claims.acceptedUntil).pipe(
          Effect.mapError(() => refuse(503, "the database is unavailable: retry later"))
        )
        if (!fresh) return yield* refuse(401, "this stream token was already used")
        principal = yield* refuseRevoked(revocations, {
          tenantId: claims.tenant_id,
          userId: claims.sub,
          projects: [claims.project],
          credential: claims.credential
        }).pipe(Effect.mapError(unauthorized))
      } else if (cookie !== undefined) {
        principal = yield* Effect.mapError(verifyAccess(cookie), unauthorized)
      } else {
        return yield* unauthorized()
      }
      if (!canSee(principal, projectId.right)) return yield* refuse(404, "project not found")

      const rawCursor = request.headers["last-event-id"] ?? url.searchParams.get("after") ??
        url.searchParams.get("last_event_id")
      let after: StreamRequest["after"] = undefined
      if (typeof rawCursor === "string" && rawCursor.length > 0) {
        const cursor = decodeCursor(rawCursor)
        if (Either.isLeft(cursor)) return yield* refuse(400, "the cursor must look like <epoch>-<seq>")
        after = cursor.right
      }
      const rawTask = url.searchParams.get("task_id")
      let taskId: string | undefined = undefined
      if (rawTask !== null) {
        const task = decodeTask(rawTask)
        if (Either.isLeft(task)) return yield* refuse(400, "task_id must be a task id")
        taskId = task.right
      }
      return {
        tenantId: principal.tenantId,
        userId: principal.userId,
        projectId: projectId.right,
        after,
        taskId,
        // who holds the stream, for closing it when the token is revoked (Revocations.ts); the gateway ignores it
        holder: { userId: principal.userId, credential: principal.credential } satisfies Holder
      } satisfies StreamRequest & { readonly holder: Holder }
    })

  return { authorize } as const
})
