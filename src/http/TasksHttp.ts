import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Effect, Either, Option } from "effect"
import { createHash } from "node:crypto"
import { TaskClient } from "../entities/TaskClient.js"
import { TaskAdmission } from "../persistence/TaskAdmission.js"
import { TaskSnapshots } from "../persistence/TaskSnapshots.js"
import { definitionOf } from "../providers/providers.js"
import { CommandRejected, ProjectNotFound, TaskNotFound, UnsupportedRequest } from "../schema/errors.js"
import type { TaskSnapshot } from "../schema/task.js"
import { currentTraceId } from "../tracing/TraceId.js"
import { ControlPlaneApi } from "./Api.js"
import { ApiSettings } from "./apiSettings.js"
import { canSee, Principal } from "./Auth.js"
import { readJson } from "./RequestBody.js"
import type { CreateTaskRequest } from "./TasksApi.js"
import { createTaskRequest, TaskPageView, TaskView } from "./TasksApi.js"

const toView = (t: TaskSnapshot): TaskView =>
  new TaskView({
    task_id: t.id,
    project_id: t.projectId,
    task_version: t.version,
    status: t.status,
    stage: t.stage,
    progress: t.progress,
    asset_id: t.assetId,
    error_code: t.errorCode,
    cursor: t.lastCursor.toString(),
    created_at: t.createdAt,
    updated_at: t.updatedAt
  })

/** Credits held at admission: seconds of video times a resolution factor (settled or refunded later). */
const reserveFor = (r: CreateTaskRequest): number =>
  r.duration_seconds * ({ "480p": 0.5, "720p": 1, "1080p": 2 } as const)[r.resolution]

/** The request's identity for Idempotency-Key replays: the decoded body with defaults, keys sorted. */
const requestHash = (r: CreateTaskRequest): string =>
  createHash("sha256").update(JSON.stringify(r, Object.keys(r).sort())).digest("hex")

export const TasksHttpLive = HttpApiBuilder.group(ControlPlaneApi, "tasks", (handlers) =>
  Effect.gen(function*() {
    const admission = yield* TaskAdmission
    const tasks = yield* TaskClient
    const snapshots = yield* TaskSnapshots
    const settings = yield* ApiSettings.config
    const readCreateRequest = readJson(createTaskRequest(settings.providers), settings.maxBodyBytes)

    const owned = Effect.fn("Tasks.owned")(function*(project: TaskSnapshot["projectId"], task: string) {
      const principal = yield* Principal
      if (!canSee(principal, project)) return yield* new TaskNotFound({ taskId: task })
      const found = yield* admission.find(principal.tenantId, project, task)
      return yield* Option.match(found, {
        onNone: () => Effect.fail(new TaskNotFound({ taskId: task })),
        onSome: Effect.succeed
      })
    })

    return handlers
      .handleRaw("create", ({ headers, path, request }) =>
        Effect.gen(function*() {
          const principal = yield* Principal
          if (!canSee(principal, path.project)) return yield* new ProjectNotFound({ projectId: path.project })
          // read here, not by the platform: limited while it streams in, every problem reported, no long echo
          const payload = yield* readCreateRequest(request)
          // what the provider would refuse is refused here, before a credit is reserved
          const refusal = Option.flatMap(
            Option.fromNullable(definitionOf(payload.provider)),
            (d) => Either.getLeft(d.check({ model: payload.model, durationSeconds: payload.duration_seconds }))
          )
          if (Option.isSome(refusal)) return yield* new UnsupportedRequest({ message: refusal.value })
          const traceId = yield* currentTraceId
          const { created, task } = yield* admission.admit({
            tenantId: principal.tenantId,
            projectId: path.project,
            userId: principal.userId,
            idempotencyKey: headers["idempotency-key"],
            requestHash: requestHash(payload),
            request: payload,
            provider: payload.provider,
            model: payload.model,
            reserveAmount: reserveFor(payload),
            traceId
          })
          if (created) {
            // The task is committed; waking its entity is best effort (the sweeper re-drives lost starts).
            yield* tasks.sendWithin(task.id, (c) => c.Start({ traceId }), "2 seconds").pipe(
              Effect.tapError((e) => Effect.logWarning("task start deferred to the sweeper", e)),
              Effect.ignore
            )
          }
          return toView(task)
        }).pipe(Effect.withSpan("Tasks.create")))
      .handle("list", ({ path, urlParams }) =>
        Effect.gen(function*() {
          const principal = yield* Principal
          const notFound = new ProjectNotFound({ projectId: path.project })
          if (!canSee(principal, path.project)) return yield* notFound
          const found = yield* snapshots.page(principal.tenantId, path.project, urlParams.limit, urlParams.before)
          if (Option.isNone(found)) return yield* notFound
          const page = found.value
          const last = page.tasks[page.tasks.length - 1]
          return new TaskPageView({
            tasks: page.tasks.map(toView),
            cursor: page.cursor.toString(),
            next_before: page.tasks.length === urlParams.limit && last !== undefined ? last.id : null
          })
        }))
      .handle("get", ({ path }) => Effect.map(owned(path.project, path.task), toView))
      .handle("cancel", ({ path }) =>
        Effect.gen(function*() {
          yield* owned(path.project, path.task)
          const traceId = yield* currentTraceId
          const res = yield* tasks.send(path.task, (c) => c.Cancel({ traceId }))
          if (res.outcome === "ignored") {
            return yield* new CommandRejected({ message: `task is ${res.task.status}: it can no longer be canceled` })
          }
          return toView(res.task)
        }))
  }))
