import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Duration, Effect } from "effect"
import * as jose from "jose"
import WebSocket from "ws"
import type { UserId } from "../../src/schema/ids.js"
import { runOps, until } from "../support/admin.js"
import { noDatabase } from "../support/database.js"
import { scaled } from "../support/env.js"
import { freePort } from "../support/runner.js"
import { openSse } from "../support/sse.js"
import {
  bearer,
  commitChange,
  layerStreamRunner,
  projectWithTasks,
  redisUrl,
  streamSettings,
  tokenFor
} from "../support/streams.js"
import { uuid } from "../support/tasks.js"

const AUTH_SECRET = "revocation-test-secret-0123456789abcdef"
// the periodic refresh is far away: a revocation written elsewhere can only arrive by its NOTIFY
const settings = { ...streamSettings, AUTH_SECRET, TOKEN_REVOCATION_REFRESH: "1 hour" }

const port = await Effect.runPromise(freePort)
const base = `http://127.0.0.1:${port}`
const eventsUrl = (projectId: string) => `${base}/v1/projects/${projectId}/events`
const wsUrl = (projectId: string) => `ws://127.0.0.1:${port}/v1/projects/${projectId}/events/ws`

/** A WebSocket client: opened (or refused), and how the server closed it. */
const openWs = (url: string, headers: Record<string, string>) =>
  Effect.async<{ readonly opened: boolean; readonly closed: () => { code: number; reason: string } | undefined }>(
    (resume) => {
      const socket = new WebSocket(url, { headers })
      let closed: { code: number; reason: string } | undefined
      let done = false
      const finish = (opened: boolean) => {
        if (done) return
        done = true
        resume(Effect.succeed({ opened, closed: () => closed }))
      }
      socket.on("open", () => finish(true))
      socket.on("message", () => undefined)
      socket.on("close", (code, reason) => {
        closed = { code, reason: reason.toString() }
        finish(false)
      })
      socket.on("error", () => finish(false))
    }
  )

const status = (path: string, headers: Record<string, string>, method = "GET") =>
  Effect.promise(() => fetch(`${base}${path}`, { method, headers }).then((r) => r.status))

const jtiOf = (token: string) => jose.decodeJwt(token).jti!

const within = Duration.seconds(15)

describe.skipIf(noDatabase || redisUrl === undefined)("token revocation and logout close open streams", () => {
  layer(layerStreamRunner(port, settings), { timeout: scaled(120_000), excludeTestServices: true })((it) => {
    it.effect("ops token revoke: the holder's SSE and WebSocket close, the token is refused, others stay open", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const { projectId, tasks } = yield* projectWithTasks(1)
        const revoked = yield* tokenFor()
        const other = yield* tokenFor()
        expect(jtiOf(revoked)).toMatch(/^[0-9a-f-]{36}$/)

        const sse = yield* openSse(eventsUrl(projectId), bearer(revoked))
        const ws = yield* openWs(wsUrl(projectId), bearer(revoked))
        const bystander = yield* openSse(eventsUrl(projectId), bearer(other))
        // a stream opened with a single-use stream token belongs to the access token it was issued to
        const streamToken = yield* Effect.promise(() =>
          fetch(`${base}/v1/projects/${projectId}/stream-tokens`, { method: "POST", headers: bearer(revoked) })
            .then((r) => r.json() as Promise<{ token: string }>)
        )
        const viaStreamToken = yield* openSse(`${eventsUrl(projectId)}?stream_token=${streamToken.token}`)
        expect([sse.status, ws.opened, bystander.status, viaStreamToken.status]).toEqual([200, true, 200, 200])

        const out = yield* runOps(["token", "revoke", jtiOf(revoked), "--reason", "leaked in a log"], {
          OPS_URL: base,
          AUTH_SECRET
        })
        expect(out.stderr).toBe("")
        expect(out.stdout).toContain(`token ${jtiOf(revoked)} revoked`)

        yield* until(
          "the revoked token's streams closed",
          Effect.sync(() => [sse.ended(), ws.closed()?.code]),
          (s) => s[0] === true && s[1] === 4401,
          within
        )
        expect(sse.events.at(-1)?.event).toBe("revoked")
        expect(yield* status(`/v1/projects/${projectId}/tasks`, bearer(revoked))).toBe(401)
        expect((yield* openSse(eventsUrl(projectId), bearer(revoked))).status).toBe(401)

        // the other user's stream is open, and live
        expect(bystander.ended()).toBe(false)
        yield* commitChange(tasks[0]!, { status: "running", stage: "generating", progress: 10 })
        yield* until("the bystander got the change", Effect.sync(() => bystander.events.length), (n) => n > 0, within)
        expect(yield* status(`/v1/projects/${projectId}/tasks`, bearer(other))).toBe(200)
        bystander.close()

        const [audit] = yield* sql<{ operator: string; what: string; reason: string }>`
          SELECT operator, what, reason FROM operator_audit WHERE subject = ${jtiOf(revoked)}`
        expect(audit).toMatchObject({ what: "token.revoke", reason: "leaked in a log" })
        expect(audit!.operator).toMatch(/^cli:/)
      }))

    it.effect("logout (DELETE /v1/session) revokes the cookie's token and closes its stream", () =>
      Effect.gen(function*() {
        const { projectId } = yield* projectWithTasks(1)
        const token = yield* tokenFor()
        const session = yield* Effect.promise(() =>
          fetch(`${base}/v1/session`, { method: "POST", headers: bearer(token) })
        )
        expect(session.status).toBe(200)
        const cookie = session.headers.get("set-cookie")!.split(";")[0]!
        const sse = yield* openSse(eventsUrl(projectId), { cookie })
        const ws = yield* openWs(wsUrl(projectId), { cookie })
        const bystander = yield* openSse(eventsUrl(projectId), bearer(yield* tokenFor()))
        expect([sse.status, ws.opened, bystander.status]).toEqual([200, true, 200])

        expect(yield* status("/v1/session", { cookie }, "DELETE")).toBe(204)
        yield* until(
          "the session's streams closed",
          Effect.sync(() => [sse.ended(), ws.closed()?.code]),
          (s) => s[0] === true && s[1] === 4401,
          within
        )
        expect(yield* status("/v1/session", { cookie })).toBe(401)
        expect(bystander.ended()).toBe(false)
        bystander.close()
      }))

    it.effect("a user's tokens revoked by another runner (a row and its NOTIFY) close here within seconds", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const { projectId } = yield* projectWithTasks(1)
        const user = uuid() as UserId
        const token = yield* tokenFor({ user })
        const sse = yield* openSse(eventsUrl(projectId), bearer(token))
        expect(sse.status).toBe(200)
        // what another runner's `token revoke --user` writes; this runner's refresh is an hour away
        yield* sql`
          INSERT INTO token_revocations (user_id, issued_before, revoked_by, reason)
          VALUES (${user}, now(), 'elsewhere', 'test')`
        yield* until("the user's stream closed", Effect.sync(() => sse.ended()), (ended) => ended, within)
        expect(yield* status(`/v1/projects/${projectId}/tasks`, bearer(token))).toBe(401)
        // a token issued after the cut-off is accepted (iat has whole seconds: from the next second on)
        yield* until(
          "a token issued after the cut-off accepted",
          Effect.flatMap(tokenFor({ user }), (fresh) => status(`/v1/projects/${projectId}/tasks`, bearer(fresh))),
          (s) => s === 200,
          within
        )
      }))
  })
})
