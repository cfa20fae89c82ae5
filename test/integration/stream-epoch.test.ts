import { describe, expect, layer } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { TokenSigner } from "../../src/http/Auth.js"
import { adminClient } from "../support/admin.js"
import { noDatabase } from "../support/database.js"
import { scaled } from "../support/env.js"
import { until } from "../support/propagation.js"
import { freePort } from "../support/runner.js"
import { openSse, payloads, type SseClient } from "../support/sse.js"
import {
  bearer,
  commitChange,
  headOf,
  layerStreamRunner,
  projectWithTasks,
  redisUrl,
  streamSettings,
  tokenFor
} from "../support/streams.js"

const port = await Effect.runPromise(freePort)
const base = `http://127.0.0.1:${port}`
const eventsUrl = (projectId: string, query = "") => `${base}/v1/projects/${projectId}/events${query}`
const resetOf = (client: SseClient) => client.events.find((e) => e.event === "reset")

/** POST /admin/streams/new-epoch with a raw body, as an operator: its status and JSON answer. */
const postRaw = (body: string) =>
  Effect.gen(function*() {
    const token = yield* Effect.flatMap(TokenSigner, (s) => s.signOperator("ops-test"))
    const res = yield* Effect.promise(() =>
      fetch(`${base}/admin/streams/new-epoch`, {
        method: "POST",
        headers: { "content-type": "application/json", ...bearer(token) },
        body
      })
    )
    return { status: res.status, body: (yield* Effect.promise(() => res.json())) as Record<string, unknown> }
  })

describe.skipIf(noDatabase || redisUrl === undefined)(
  "new stream epochs after a restore (POST /admin/streams/new-epoch)",
  () => {
    layer(layerStreamRunner(port, streamSettings), { timeout: scaled(120_000), excludeTestServices: true })((it) => {
      it.effect("an old cursor gets a reset (foreign_epoch) with the new head; an open stream is closed; audited", () =>
        Effect.gen(function*() {
          const { projectId, tasks } = yield* projectWithTasks(2)
          const other = yield* projectWithTasks(1)
          const token = yield* tokenFor()
          for (const task of tasks) yield* commitChange(task, { status: "running", stage: "generating", progress: 5 })
          const before = yield* headOf(projectId)
          const otherBefore = yield* headOf(other.projectId)

          // a client following live from the head, and the cursor it holds
          const open = yield* openSse(eventsUrl(projectId), bearer(token))
          expect(open.status).toBe(200)
          yield* commitChange(tasks[0]!, { status: "running", stage: "generating", progress: 10 })
          yield* until("the live event", () => payloads(open).length === 1)
          const held = payloads(open)[0]!.id
          expect(held).toBe(`${before.epoch}-${before.seq + 1}`)

          const admin = yield* adminClient(base)
          const answer = yield* admin.operations.newStreamEpoch({
            payload: { project_id: projectId, reason: "test: restored to a point in time" }
          })
          const after = yield* headOf(projectId)
          expect(answer.bumped).toBe(1)
          expect(answer.projects).toEqual([
            expect.objectContaining({ project_id: projectId, from_epoch: before.epoch, to_epoch: after.epoch })
          ])
          expect(after.epoch).toBeGreaterThan(before.epoch)
          expect(after.seq).toBe(before.seq + 1) // the sequence goes on: (project_id, cursor_seq) stays unique
          expect((yield* headOf(other.projectId)).epoch).toBe(otherBefore.epoch) // one project asked: one bumped

          // the open stream is closed by its gateway (within a tail tick): its client reconnects with its cursor
          yield* until("the open stream ends", () => open.ended(), Duration.seconds(10))
          expect(resetOf(open)).toBeUndefined()

          // the client resumes with the cursor it held: a reset to the new head, never events under the old epoch
          const resumed = yield* openSse(eventsUrl(projectId), { ...bearer(token), "last-event-id": held })
          yield* until("reset", () => resetOf(resumed) !== undefined, Duration.seconds(5))
          const reset = resetOf(resumed)!
          expect(JSON.parse(reset.data)).toEqual({ reason: "foreign_epoch", cursor: `${after.epoch}-${after.seq}` })
          expect(reset.id).toBe(`${after.epoch}-${after.seq}`)
          expect(payloads(resumed)).toHaveLength(0)
          // and from there the stream goes on live under the new epoch
          yield* commitChange(tasks[1]!, { status: "running", stage: "generating", progress: 20 })
          yield* until("the next event", () => payloads(resumed).length === 1)
          expect(payloads(resumed)[0]!.id).toBe(`${after.epoch}-${after.seq + 1}`)
          resumed.close()

          const { changes } = yield* admin.operations.audit()
          expect(changes[0]).toMatchObject({
            operator: "ops-test",
            what: `stream-epoch ${projectId}`,
            from: String(before.epoch),
            to: String(after.epoch),
            reason: "test: restored to a point in time"
          })
        }))

      it.effect("without a project every stream gets a new epoch", () =>
        Effect.gen(function*() {
          const a = yield* projectWithTasks(1)
          const b = yield* projectWithTasks(1)
          const [beforeA, beforeB] = [yield* headOf(a.projectId), yield* headOf(b.projectId)]
          const admin = yield* adminClient(base)
          const answer = yield* admin.operations.newStreamEpoch({ payload: { reason: "test: restore" } })
          expect(answer.bumped).toBeGreaterThanOrEqual(2)
          expect((yield* headOf(a.projectId)).epoch).toBeGreaterThan(beforeA.epoch)
          expect((yield* headOf(b.projectId)).epoch).toBeGreaterThan(beforeB.epoch)
          const { changes } = yield* admin.operations.audit()
          expect(changes[0]).toMatchObject({
            what: `stream-epoch all projects (${answer.bumped})`,
            reason: "test: restore"
          })
        }))

      it.effect("bad bodies get a 400 and an unknown project a 404; neither changes an epoch", () =>
        Effect.gen(function*() {
          const { projectId } = yield* projectWithTasks(1)
          const before = yield* headOf(projectId)
          for (
            const body of [
              "{}",
              JSON.stringify({ reason: "" }),
              JSON.stringify({ reason: "   " }),
              JSON.stringify({ project_id: projectId }),
              JSON.stringify({ project_id: "not-a-uuid", reason: "x" }),
              JSON.stringify({ project_id: 7, reason: "x" }),
              JSON.stringify({ reason: "x".repeat(501) }),
              "not json"
            ]
          ) {
            const res = yield* postRaw(body)
            expect({ body, status: res.status }).toEqual({ body, status: 400 })
          }
          const unknown = yield* postRaw(JSON.stringify({ project_id: crypto.randomUUID(), reason: "x" }))
          expect(unknown.status).toBe(404)
          expect((yield* headOf(projectId)).epoch).toBe(before.epoch)
        }))
    })
  }
)
