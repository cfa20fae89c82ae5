import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Effect, Option } from "effect"
import { TaskClient } from "../../entities/TaskClient.js"
import { InboxAdmin } from "../../intake/InboxAdmin.js"
import { FenceControl } from "../../persistence/FenceControl.js"
import { OperatorAudit } from "../../persistence/OperatorAudit.js"
import { OperatorQueues } from "../../persistence/OperatorQueues.js"
import { StreamEpochs } from "../../persistence/StreamEpochs.js"
import type { FenceView } from "../../persistence/WriteFence.js"
import { listDeadLetters, replayDeadLetters } from "../../propagation/DeadLetters.js"
import { providerNames } from "../../providers/providers.js"
import { NotFound, OperationRefused, StorageUnavailable } from "../../schema/errors.js"
import { trusted } from "../../schema/task.js"
import { ControlPlaneApi } from "../Api.js"
import {
  AuditChange,
  AuditView,
  DeadLettersView,
  DeadLetterView,
  InboxRowsView,
  InboxRowView,
  ModeView,
  OutboxView,
  ReconciliationsView,
  ReconciliationView,
  Replayed,
  ResolvedTask,
  ReviewTask,
  ReviewView,
  StreamEpochChange,
  StreamEpochsView
} from "./OperationsApi.js"
import { Operator } from "./OperatorAuth.js"

const modeView = (v: FenceView) =>
  new ModeView({
    mode: v.mode,
    active_region: v.activeRegion,
    write_epoch: v.writeEpoch,
    updated_at: v.updatedAt,
    degraded_providers: v.degradedProviders
  }, trusted)

const storageFailed = (what: string) => (cause: unknown) =>
  Effect.zipRight(
    Effect.logError(`${what} failed`, cause),
    Effect.fail(new StorageUnavailable({ message: `${what} failed: retry later` }))
  )

/** The operations group (src/http/admin/OperationsApi.ts): every change names its operator in operator_audit. */
export const OperationsHttpLive = HttpApiBuilder.group(
  ControlPlaneApi,
  "operations",
  (handlers) =>
    Effect.gen(function*() {
      const control = yield* FenceControl
      const audit = yield* OperatorAudit
      const queues = yield* OperatorQueues
      const inbox = yield* InboxAdmin
      const tasks = yield* TaskClient
      const streams = yield* StreamEpochs
      const record = (e: Parameters<typeof audit.record>[0]) =>
        audit.record(e).pipe(Effect.catchAll(storageFailed("writing the audit row")))

      return handlers
        .handle("getMode", () => Effect.map(control.current, modeView))
        .handle("setMode", ({ payload }) =>
          Effect.gen(function*() {
            const { operator } = yield* Operator
            const providers = payload.providers ?? []
            if (payload.mode === "DEGRADED_PROVIDER" && providers.length === 0) {
              return yield* new OperationRefused({ message: "DEGRADED_PROVIDER needs the providers it degrades" })
            }
            if (payload.mode !== "DEGRADED_PROVIDER" && providers.length > 0) {
              return yield* new OperationRefused({ message: `${payload.mode} takes no providers` })
            }
            const unknown = providers.filter((p) => !providerNames.includes(p))
            if (unknown.length > 0) {
              return yield* new OperationRefused({
                message: `unknown provider ${unknown.join(", ")}: one of ${providerNames.join(", ")}`
              })
            }
            return modeView(yield* control.setMode(operator, payload.mode, [...new Set(providers)], payload.reason))
          }))
        .handle("bumpEpoch", ({ payload }) =>
          Effect.gen(function*() {
            const { operator } = yield* Operator
            return modeView(yield* control.bumpEpoch(operator, payload.region, payload.reason))
          }))
        .handle("newStreamEpoch", ({ payload }) =>
          Effect.gen(function*() {
            const { operator } = yield* Operator
            const changes = yield* streams.bump(operator, payload.project_id, payload.reason)
            if (changes.length === 0 && payload.project_id !== undefined) {
              return yield* new NotFound({ message: `no project ${payload.project_id}` })
            }
            return new StreamEpochsView({
              bumped: changes.length,
              projects: changes.slice(0, 100).map((c) =>
                new StreamEpochChange({ project_id: c.projectId, from_epoch: c.from, to_epoch: c.to }, trusted)
              )
            }, trusted)
          }))
        .handle("audit", () =>
          Effect.map(audit.recent(200), (rows) =>
            new AuditView({
              changes: rows.map((r) =>
                new AuditChange({
                  at: r.at,
                  operator: r.operator,
                  what: r.subject === null ? r.what : `${r.what} ${r.subject}`,
                  from: r.from,
                  to: r.to,
                  reason: r.reason
                }, trusted)
              )
            }, trusted)))
        .handle("outbox", () => Effect.map(queues.outbox, (o) => new OutboxView(o, trusted)))
        .handle("inboxDead", () =>
          Effect.map(
            inbox.list("dead"),
            (rows) => new InboxRowsView({ rows: rows.map((r) => new InboxRowView(r, trusted)) }, trusted)
          ))
        .handle("inboxOrphans", () =>
          Effect.map(
            inbox.list("orphans"),
            (rows) => new InboxRowsView({ rows: rows.map((r) => new InboxRowView(r, trusted)) }, trusted)
          ))
        .handle("inboxReplay", ({ payload }) =>
          Effect.gen(function*() {
            const { operator } = yield* Operator
            const id = payload.id === "all" ? "all" : Number(payload.id)
            const replayed = yield* inbox.replay(payload.which, id)
            if (replayed === 0 && id !== "all") {
              return yield* new NotFound({ message: `no ${payload.which} inbox row ${id}` })
            }
            yield* record({
              operator,
              what: "inbox.replay",
              subject: String(id),
              from: payload.which,
              to: `${replayed} replayed`,
              reason: "replay"
            })
            return new Replayed({ replayed }, trusted)
          }))
        .handle("deadLetters", () =>
          listDeadLetters.pipe(
            Effect.map((rows) =>
              new DeadLettersView({ rows: rows.map((r) => new DeadLetterView(r, trusted)) }, trusted)
            ),
            Effect.catchAll(storageFailed("reading the dead letters"))
          ))
        .handle("deadLettersReplay", ({ payload }) =>
          Effect.gen(function*() {
            const { operator } = yield* Operator
            const replayed = yield* replayDeadLetters(payload.id).pipe(
              Effect.catchAll(storageFailed("replaying the dead letters"))
            )
            if (replayed === 0 && payload.id !== "all") {
              return yield* new NotFound({ message: `no open dead letter ${payload.id}` })
            }
            yield* record({
              operator,
              what: "dead-letters.replay",
              subject: String(payload.id),
              from: null,
              to: `${replayed} replayed`,
              reason: "replay"
            })
            return new Replayed({ replayed }, trusted)
          }))
        .handle("review", ({ urlParams }) =>
          Effect.map(queues.review(urlParams.cursor, urlParams.limit ?? 100), (page) =>
            new ReviewView({
              tasks: page.tasks.map((t) => new ReviewTask(t, trusted)),
              next_cursor: page.next_cursor
            }, trusted)))
        .handle("resolveReview", ({ path, payload }) =>
          Effect.gen(function*() {
            const { operator } = yield* Operator
            const res = yield* tasks.send(path.task, (c) =>
              c.Resolve({
                as: payload.as,
                operator,
                reason: payload.reason,
                traceId: `operator-${crypto.randomUUID()}`
              }))
            if (res.outcome !== "changed") {
              return yield* new OperationRefused({
                message: res.reason === "no_output"
                  ? "no provider output is known for this task, so it cannot be made ready: resolve it as failed or canceled"
                  : `task is ${res.task.status}, not in manual_review`
              })
            }
            yield* record({
              operator,
              what: "review.resolve",
              subject: path.task,
              from: "manual_review",
              to: res.task.status,
              reason: payload.reason
            })
            return new ResolvedTask({ task_id: path.task, status: res.task.status, version: res.task.version }, trusted)
          }))
        .handle("reconciliations", () =>
          Effect.map(queues.reconciliations, (rows) =>
            new ReconciliationsView({
              rows: rows.map((r) => new ReconciliationView(r, trusted))
            }, trusted)))
        .handle("resolveReconciliation", ({ path, payload }) =>
          Effect.gen(function*() {
            const { operator } = yield* Operator
            const resolved = yield* queues.resolveReconciliation(path.id)
            if (Option.isNone(resolved)) {
              return yield* new NotFound({ message: `no open reconciliation ${path.id}` })
            }
            yield* record({
              operator,
              what: "reconciliation.resolve",
              subject: `${path.id} (task ${resolved.value.task_id})`,
              from: "open",
              to: "resolved",
              reason: payload.reason
            })
          }))
    })
)
