import { describe, expect, layer } from "@effect/vitest"
import { Duration, Effect, Schedule } from "effect"
import * as jose from "jose"
import { TokenSigner } from "../../src/http/Auth.js"
import { EventLog } from "../../src/persistence/EventLog.js"
import type { UserId } from "../../src/schema/ids.js"
import { noDatabase } from "../support/database.js"
import { scaled, scaledDuration } from "../support/env.js"
import { until } from "../support/propagation.js"
import { freePort } from "../support/runner.js"
import { openSse, payloads, seqOf, type SseClient } from "../support/sse.js"
import {
  bearer,
  busChannels,
  commitChange,
  headOf,
  layerStreamRunner,
  projectWithTasks,
  redisUrl,
  storedEvents,
  streamSettings,
  TENANT,
  tokenFor
} from "../support/streams.js"

// the token test needs expiry to mean expiry: no tolerance for clock skew
const settings = { ...streamSettings, AUTH_CLOCK_SKEW: "0 seconds" }

const port = await Effect.runPromise(freePort)
const eventsUrl = (projectId: string) => `http://127.0.0.1:${port}/v1/projects/${projectId}/events`

/** The client's cursors are exactly the stored ones after `afterSeq` (up to what it got): in order, none missing. */
const expectExact = (client: SseClient, projectId: string, afterSeq: number) =>
  Effect.gen(function*() {
    const stored = (yield* storedEvents(projectId, afterSeq)).map((r) => Number(r.cursor_seq))
    expect(payloads(client).map((e) => seqOf(e.id))).toEqual(stored)
  })

const progress = (i: number) => ({ status: "running" as const, stage: "generating" as const, progress: i })

describe.skipIf(noDatabase || redisUrl === undefined)("SSE open path: shared feeds, resumes, verified tokens", () => {
  layer(layerStreamRunner(port, settings), { timeout: scaled(120_000), excludeTestServices: true })((it) => {
    it.effect("many streams of a project share one feed: each gets every event in order; the feed ends after the last", () =>
      Effect.gen(function*() {
        const { projectId, tasks } = yield* projectWithTasks(2)
        const tokens = yield* Effect.all([tokenFor(), tokenFor(), tokenFor()])
        const from = (yield* headOf(projectId)).seq
        const clients = yield* Effect.all(
          Array.from({ length: 12 }, (_, i) => openSse(eventsUrl(projectId), bearer(tokens[i % 3]!))),
          { concurrency: "unbounded" }
        )
        expect(clients.map((c) => c.status)).toEqual(clients.map(() => 200))
        // one Redis subscription for all of them
        expect(yield* busChannels(projectId)).toHaveLength(1)
        for (let i = 0; i < 10; i++) yield* commitChange(tasks[i % 2]!, progress(i))
        yield* until("every stream has every event", () => clients.every((c) => payloads(c).length >= 10))
        for (const client of clients) yield* expectExact(client, projectId, from)
        clients.forEach((c) => c.close())
        // the feed lingers a tail tick for reconnecting clients, then lets its subscription go
        yield* busChannels(projectId).pipe(
          Effect.filterOrFail((channels) => channels.length === 0, () => "the feed kept its subscription"),
          Effect.retry(Schedule.spaced(Duration.millis(100)).pipe(Schedule.upTo(scaledDuration(Duration.seconds(10)))))
        )
      }))

    it.effect("a reconnect resumes exactly: behind the feed it replays, at the feed it goes live, past retention it resets", () =>
      Effect.gen(function*() {
        const { projectId, tasks } = yield* projectWithTasks(1)
        const token = yield* tokenFor()
        const task = tasks[0]!
        const head0 = yield* headOf(projectId)
        // a client that stays: the project's feed runs throughout, so the others open against its view
        const keeper = yield* openSse(eventsUrl(projectId), bearer(token))
        for (let i = 0; i < 3; i++) yield* commitChange(task, progress(i))
        const first = yield* openSse(eventsUrl(projectId), bearer(token))
        yield* commitChange(task, progress(3))
        // a stream opened without a cursor starts at the feed's position: it may also get the event committed just
        // before it connected (a duplicate at worst, never a gap), so what is awaited is the last one
        const lastOf = (client: SseClient) => seqOf(payloads(client).at(-1)?.id ?? "0-0")
        const fourth = (yield* headOf(projectId)).seq
        yield* until("the first client's event", () => lastOf(first) === fourth)
        const cursor = payloads(first).at(-1)!.id
        first.close()
        // missed while away, then resumed by Last-Event-ID: exactly what it missed, then live
        for (let i = 4; i < 8; i++) yield* commitChange(task, progress(i))
        const eighth = (yield* headOf(projectId)).seq
        yield* until("the feed has them", () => lastOf(keeper) === eighth)
        const resumed = yield* openSse(eventsUrl(projectId), { ...bearer(token), "last-event-id": cursor })
        yield* commitChange(task, progress(8))
        const upTo = (yield* headOf(projectId)).seq
        yield* until("missed and live events", () => lastOf(resumed) === upTo)
        yield* expectExact(resumed, projectId, seqOf(cursor))
        expect(payloads(resumed).length).toBeGreaterThanOrEqual(5)
        // from where the feed stands: live only
        const at = payloads(keeper).at(-1)!.id
        const current = yield* openSse(eventsUrl(projectId), { ...bearer(token), "last-event-id": at })
        yield* commitChange(task, progress(9))
        yield* until("the next event", () => lastOf(current) === upTo + 1)
        yield* expectExact(current, projectId, seqOf(at))
        resumed.close()
        current.close()

        // retention forgets the events the feed started with its view of (it still believes nothing was forgotten):
        // a resume from before them is told so with a reset, never left with a silent gap
        yield* (yield* EventLog).forget(Duration.zero, 10_000)
        const head = yield* headOf(projectId)
        const late = yield* openSse(eventsUrl(projectId), { ...bearer(token), "last-event-id": `${head0.epoch}-1` })
        yield* until("a reset", () => late.events.some((e) => e.event === "reset"))
        const reset = late.events.find((e) => e.event === "reset")!
        expect(JSON.parse(reset.data)).toEqual({ reason: "expired", cursor: `${head.epoch}-${head.seq}` })
        expect(payloads(late)).toHaveLength(0)
        late.close()
        keeper.close()
      }))

    it.effect("an access token is verified once, yet refused once it expires; a forged one is refused every time", () =>
      Effect.gen(function*() {
        const { projectId } = yield* projectWithTasks(1)
        const signer = yield* TokenSigner
        const token = yield* signer.sign({ tenant_id: TENANT, sub: crypto.randomUUID() as UserId, projects: "*" }, 2)
        const expiresAt = jose.decodeJwt(token).exp! * 1000
        for (let i = 0; i < 2; i++) {
          const client = yield* openSse(eventsUrl(projectId), bearer(token))
          expect(client.status).toBe(200)
          client.close()
        }
        yield* until("the token expired", () => Date.now() > expiresAt + 50, Duration.seconds(10))
        expect((yield* openSse(eventsUrl(projectId), bearer(token))).status).toBe(401)

        const valid = yield* tokenFor()
        const forged = valid.slice(0, -4) + (valid.endsWith("AAAA") ? "BBBB" : "AAAA")
        for (let i = 0; i < 2; i++) expect((yield* openSse(eventsUrl(projectId), bearer(forged))).status).toBe(401)
        const good = yield* openSse(eventsUrl(projectId), bearer(valid))
        expect(good.status).toBe(200)
        good.close()
      }))
  })
})
