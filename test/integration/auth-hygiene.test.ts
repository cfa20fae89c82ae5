import { describe, expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as jose from "jose"
import * as http from "node:http"
import WebSocket from "ws"
import { ISSUER, TokenKinds, TokenSigner } from "../../src/http/Auth.js"
import { EventLog } from "../../src/persistence/EventLog.js"
import { devCallbackTokenSecret, devSecret } from "../../src/providers/devSecrets.js"
import { callbackQuery } from "../../src/providers/signatures.js"
import type { ProjectId } from "../../src/schema/ids.js"
import { noDatabase } from "../support/database.js"
import { scaled } from "../support/env.js"
import { freePort } from "../support/runner.js"
import { openSse } from "../support/sse.js"
import {
  bearer,
  layerStreamRunner,
  projectWithTasks,
  redisUrl,
  streamSettings,
  TENANT,
  tokenFor
} from "../support/streams.js"
import { uuid } from "../support/tasks.js"
import { eventually, openaiEvent, openAISigner, submittedTask } from "../support/webhooks.js"

const AUTH_SECRET = "auth-hygiene-test-secret-0123456789abcdef"
const key = new TextEncoder().encode(AUTH_SECRET)

const port = await Effect.runPromise(freePort)
const base = `http://127.0.0.1:${port}`
/** Browsers reach this platform over https (a TLS-terminating proxy in front); the runner itself speaks plain HTTP. */
const PUBLIC_BASE_URL = "https://tasks.example.test"
const publicOrigin = `https://127.0.0.1:${port}`

const settings = {
  ...streamSettings,
  AUTH_SECRET,
  // wider than the default 30 s, so that a token accepted within the skew can outlive the spent-token sweep's minute
  AUTH_CLOCK_SKEW: "3 minutes",
  PUBLIC_BASE_URL,
  // OpenAI and Luma keep their real base URLs (the defaults) but are given the simulator's public secrets;
  // Replicate points at this machine (a simulator), where its development secret is fine
  OPENAI_WEBHOOK_SECRET: devSecret("openai"),
  CALLBACK_TOKEN_SECRET: devCallbackTokenSecret,
  REPLICATE_BASE_URL: "http://127.0.0.1:9/replicate",
  REPLICATE_WEBHOOK_SECRET: devSecret("replicate")
}

const nowSeconds = () => Math.floor(Date.now() / 1000)

/** A token signed with the runner's secret, shaped by hand: its kind (typ header, audience) and claims as given. */
const handMade = (
  kind: keyof typeof TokenKinds,
  claims: Record<string, unknown>,
  times: { readonly iat?: number; readonly nbf?: number; readonly exp?: number } = {}
) =>
  Effect.promise(() =>
    new jose.SignJWT({
      sub: uuid(),
      iss: ISSUER,
      aud: TokenKinds[kind].audience,
      iat: nowSeconds(),
      exp: nowSeconds() + 600,
      ...times,
      ...claims
    }).setProtectedHeader({ alg: "HS256", typ: TokenKinds[kind].typ }).sign(key)
  )

/** The claims of an access token and of a stream token at once: only the token's kind can tell them apart. */
const bothShapes = (projectId: ProjectId) => ({
  tenant_id: TENANT,
  projects: "*",
  typ: "stream",
  project: projectId,
  jti: uuid()
})

/** GET /v1/session with a bearer token: 200 with the principal, or 401. */
const whoAmI = (token: string) =>
  Effect.promise(() => fetch(`${base}/v1/session`, { headers: bearer(token) }).then((r) => r.status))

/** An access token's claims without exp (jose's `set…` helpers would always add what we ask for). */
const withoutExp = (times: { readonly iat?: number; readonly nbf?: number }) =>
  Effect.promise(() =>
    new jose.SignJWT({
      tenant_id: TENANT,
      projects: "*",
      sub: uuid(),
      iss: ISSUER,
      aud: TokenKinds.access.audience,
      ...times
    })
      .setProtectedHeader({ alg: "HS256", typ: TokenKinds.access.typ })
      .sign(key)
  )

interface WsOutcome {
  readonly status: number
  readonly headers: Record<string, string | Array<string> | undefined>
  readonly socket: WebSocket
  readonly closed: () => number | undefined
}

/** Opens a WebSocket: 101 once upgraded, else the refusal's HTTP status and headers. */
const openWs = (url: string, headers: Record<string, string>) =>
  Effect.async<WsOutcome>((resume) => {
    const socket = new WebSocket(url, { headers })
    let closed: number | undefined
    let done = false
    const finish = (status: number, h: WsOutcome["headers"] = {}) => {
      if (done) return
      done = true
      resume(Effect.succeed({ status, headers: h, socket, closed: () => closed }))
    }
    socket.on("open", () => finish(101))
    socket.on("close", (code) => {
      closed = code
      finish(0)
    })
    socket.on("error", () => finish(0))
    socket.on("unexpected-response", (req, res) => {
      finish(res.statusCode ?? 0, res.headers)
      res.resume()
      req.destroy()
    })
  })

const wsUrl = (projectId: string) => `ws://127.0.0.1:${port}/v1/projects/${projectId}/events/ws`
const eventsUrl = (projectId: string, query = "") => `${base}/v1/projects/${projectId}/events${query}`

describe.skipIf(noDatabase || redisUrl === undefined)("token and session hygiene on a runner", () => {
  layer(layerStreamRunner(port, settings), { timeout: scaled(120_000), excludeTestServices: true })((it) => {
    it.effect("a token must carry exp; iat and nbf may lie in the future only within AUTH_CLOCK_SKEW", () =>
      Effect.gen(function*() {
        const claims = { tenant_id: TENANT, projects: "*" }
        expect(yield* whoAmI(yield* tokenFor())).toBe(200)
        // no expiry: valid for ever (was 200)
        expect(yield* whoAmI(yield* withoutExp({ iat: nowSeconds() }))).toBe(401)
        // issued ten minutes from now: a signer whose clock runs ahead, or a token minted to outlive its exp (was 200)
        expect(yield* whoAmI(yield* handMade("access", claims, { iat: nowSeconds() + 600, exp: nowSeconds() + 1200 })))
          .toBe(401)
        // within the skew: clocks that differ a little are not an attack (nbf was 401 at any skew)
        expect(yield* whoAmI(yield* handMade("access", claims, { iat: nowSeconds() + 10, nbf: nowSeconds() + 10 })))
          .toBe(200)
        expect(yield* whoAmI(yield* handMade("access", claims, { nbf: nowSeconds() + 600 }))).toBe(401)
        expect(yield* whoAmI(yield* handMade("access", claims, { exp: nowSeconds() - 600 }))).toBe(401)
      }))

    it.effect("access and stream tokens are told apart by their kind (typ, aud), never by their claims", () =>
      Effect.gen(function*() {
        const { projectId } = yield* projectWithTasks(1)
        const access = yield* tokenFor()
        const issued = yield* Effect.promise(() =>
          fetch(`${base}/v1/projects/${projectId}/stream-tokens`, { method: "POST", headers: bearer(access) })
            .then((r) => r.json() as Promise<{ token: string }>)
        )
        // each used as the other
        expect((yield* openSse(eventsUrl(projectId, `?stream_token=${access}`))).status).toBe(401)
        expect(yield* whoAmI(issued.token)).toBe(401)
        expect((yield* openSse(eventsUrl(projectId), bearer(issued.token))).status).toBe(401)

        // tokens carrying the claims of both: a stream token is still no bearer (was 200), an access token still no
        // stream token (was 200); each works as what it is
        const streamKind = yield* handMade("stream", bothShapes(projectId))
        const accessKind = yield* handMade("access", bothShapes(projectId))
        expect(yield* whoAmI(streamKind)).toBe(401)
        expect((yield* openSse(eventsUrl(projectId, `?stream_token=${accessKind}`))).status).toBe(401)
        expect(yield* whoAmI(accessKind)).toBe(200)
        const asStream = yield* openSse(eventsUrl(projectId, `?stream_token=${streamKind}`))
        expect(asStream.status).toBe(200)
        asStream.close()
      }))

    it.effect("a stream token accepted within the skew after its exp stays spent that long", () =>
      Effect.gen(function*() {
        const { projectId } = yield* projectWithTasks(1)
        const claims = { tenant_id: TENANT, project: projectId, jti: uuid() }
        // expired 90 s ago by the signer's clock: within AUTH_CLOCK_SKEW (3 minutes) of this runner's
        const late = yield* handMade("stream", claims, { iat: nowSeconds() - 150, exp: nowSeconds() - 90 })
        const first = yield* openSse(eventsUrl(projectId, `?stream_token=${late}`))
        expect(first.status).toBe(200)
        first.close()
        // the retention sweep forgets spent tokens a minute after they can no longer be presented: this one can
        // still be presented for another 90 s (was: forgotten at once, and then accepted a second time)
        yield* Effect.flatMap(EventLog, (log) => log.forgetSpentTokens)
        expect((yield* openSse(eventsUrl(projectId, `?stream_token=${late}`))).status).toBe(401)
      }))

    it.effect("the session cookie is Secure because PUBLIC_BASE_URL is https, whatever the Host header says", () =>
      Effect.gen(function*() {
        const token = yield* tokenFor()
        for (const host of [`127.0.0.1:${port}`, "localhost", "tasks.example.test"]) {
          // fetch would not send another Host than the URL's
          const session = yield* Effect.async<http.IncomingMessage>((resume) => {
            http.request(`${base}/v1/session`, { method: "POST", headers: { ...bearer(token), host } }, (res) => {
              res.resume()
              resume(Effect.succeed(res))
            }).on("error", (e) => resume(Effect.die(e))).end()
          })
          expect(session.statusCode).toBe(200)
          // a loopback Host used to drop Secure
          expect(session.headers["set-cookie"]?.[0]).toMatch(/tcp_session=[^;]+;.*Secure/i)
        }
        const dev = yield* Effect.promise(() => fetch(`${base}/v1/dev/session`, { method: "POST" }))
        // AUTH_SECRET is set: no development sessions
        expect(dev.status).toBe(401)
      }))

    it.effect("the Origin check compares the scheme: http://host is not https://host", () =>
      Effect.gen(function*() {
        const { projectId } = yield* projectWithTasks(1)
        const token = yield* tokenFor()
        const session = yield* Effect.promise(() =>
          fetch(`${base}/v1/session`, { method: "POST", headers: bearer(token) })
        )
        const cookie = session.headers.get("set-cookie")!.split(";")[0]!
        const api = (origin: string) =>
          Effect.promise(() =>
            fetch(`${base}/v1/projects/${projectId}/tasks`, { headers: { cookie, origin } }).then((r) => r.status)
          )
        // the page as browsers see it: PUBLIC_BASE_URL's scheme, this host
        expect(yield* api(publicOrigin)).toBe(200)
        const sse = yield* openSse(eventsUrl(projectId), { cookie, origin: publicOrigin })
        expect(sse.status).toBe(200)
        sse.close()
        const ws = yield* openWs(wsUrl(projectId), { cookie, origin: publicOrigin })
        expect(ws.status).toBe(101)
        ws.socket.close()

        // the same host over plain http: another origin (was 200, 200 and 101)
        const plain = `http://127.0.0.1:${port}`
        expect(yield* api(plain)).toBe(401)
        expect((yield* openSse(eventsUrl(projectId), { cookie, origin: plain })).status).toBe(403)
        expect((yield* openWs(wsUrl(projectId), { cookie, origin: plain })).status).toBe(403)
      }))

    it.effect("a WebSocket over the per-user limit is refused with 429 and Retry-After before the upgrade", () =>
      Effect.gen(function*() {
        const { projectId } = yield* projectWithTasks(1)
        const token = yield* tokenFor({ user: uuid() })
        const open = yield* Effect.forEach(Array.from({ length: 16 }), () => openWs(wsUrl(projectId), bearer(token)))
        expect(open.map((c) => c.status)).toEqual(Array(16).fill(101))
        // was: upgraded (101), then closed with 4429
        const over = yield* openWs(wsUrl(projectId), bearer(token))
        expect(over.status).toBe(429)
        expect(Number(over.headers["retry-after"])).toBeGreaterThan(0)
        expect(over.closed()).toBeUndefined()
        // WebSockets and SSE share the user's limit
        const sse = yield* openSse(eventsUrl(projectId), bearer(token))
        expect(sse.status).toBe(429)
        // a closed stream gives its place back, once the gateway has seen it close; refusals held none
        open.forEach((c) => c.socket.close())
        const again = yield* eventually(openWs(wsUrl(projectId), bearer(token)), (c) => c.status === 101)
        again.socket.close()
      }))

    it.effect("operator tokens open the admin API only, and tenants' tokens never do", () =>
      Effect.gen(function*() {
        const admin = (token: string) =>
          Effect.promise(() => fetch(`${base}/admin/whoami`, { headers: bearer(token) }).then((r) => r.status))
        const operator = yield* Effect.flatMap(TokenSigner, (s) => s.signOperator("alice"))
        const tokenOfTenant = yield* tokenFor()
        expect(yield* admin(operator)).toBe(200)
        const me = yield* Effect.promise(() =>
          fetch(`${base}/admin/whoami`, { headers: bearer(operator) }).then((r) => r.json())
        )
        expect(me).toEqual({ operator: "alice" })
        // a tenant's access token, even one covering every project, is not an operator's
        expect(yield* admin(yield* tokenFor())).toBe(401)
        expect(
          yield* Effect.promise(() =>
            fetch(`${base}/admin/cluster`, { headers: bearer(tokenOfTenant) }).then((r) => r.status)
          )
        ).toBe(401)
        // an operator token's claims with a tenant token's kind, and the reverse: the kind decides
        expect(yield* admin(yield* handMade("access", { tenant_id: TENANT, projects: "*" }))).toBe(401)
        expect(yield* whoAmI(operator)).toBe(401)
        expect(yield* admin(yield* handMade("operator", {}))).toBe(200)
        // no token at all
        expect(yield* Effect.promise(() => fetch(`${base}/admin/whoami`).then((r) => r.status))).toBe(401)
      }))

    it.effect("the simulator's development secrets verify nothing for a provider whose base URL is not local", () =>
      Effect.gen(function*() {
        const postWebhook = (path: string, body: string, headers: Record<string, string>) =>
          Effect.promise(() =>
            fetch(`${base}${path}`, {
              method: "POST",
              headers: { ...headers, "content-type": "application/json" },
              body
            }).then((r) => r.status)
          )
        // OpenAI's base URL is its real API: a webhook signed with the public development secret (was 204)
        const openai = openaiEvent(`video_${uuid()}`)
        expect(yield* postWebhook("/webhooks/openai", openai, openAISigner(devSecret("openai"))(openai))).toBe(404)
        // Luma's too: a callback token made with the development callback secret (was 204)
        const luma = yield* submittedTask("luma", `gen-${uuid()}`)
        const query = callbackQuery(devCallbackTokenSecret, "luma", luma.attemptId, new Date())
        expect(
          yield* postWebhook(
            `/webhooks/luma?${query}`,
            JSON.stringify({ id: `gen-${uuid()}`, state: "dreaming" }),
            {}
          )
        ).toBe(404)
        // Replicate's base URL is on this machine (a simulator): its development secret still works there
        const prediction = JSON.stringify({ id: `p-${uuid()}`, status: "starting" })
        expect(yield* postWebhook("/webhooks/replicate", prediction, openAISigner(devSecret("replicate"))(prediction)))
          .toBe(204)
      }))
  })
})
