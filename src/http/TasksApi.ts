import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import { Schema } from "effect"
import { providerNames } from "../providers/providers.js"
import {
  AdmissionsThrottled,
  CommandRejected,
  IdempotencyKeyReused,
  PayloadTooLarge,
  ProjectNotFound,
  StorageUnavailable,
  TaskNotFound,
  TaskUnavailable,
  UnsupportedRequest,
  VersionConflict,
  WriteFenced
} from "../schema/errors.js"
import { ProjectId, ProviderName, TaskId } from "../schema/ids.js"
import { Progress, PublicErrorCode, Stage, TaskStatus } from "../schema/task.js"
import { StorableString } from "../schema/text.js"
import { Authentication } from "./Auth.js"

const text = (maxLength: number) => StorableString.pipe(Schema.minLength(1), Schema.maxLength(maxLength))

/**
 * A task request naming one of `providers` (the ones enabled on this runner, PROVIDERS_ENABLED): any other
 * provider is a 400 that lists them, before a credit is reserved.
 */
export const createTaskRequest = (providers: ReadonlyArray<string>) => {
  const configured = `one of the configured providers: ${providers.join(", ")}`
  return Schema.Struct({
    provider: ProviderName.pipe(
      Schema.filter((name) => providers.includes(name)),
      Schema.annotations({ message: () => ({ message: `must be ${configured}`, override: true }) }),
      Schema.annotations({ description: configured, jsonSchema: { type: "string", enum: providers } })
    ),
    model: text(128),
    prompt: text(4000),
    duration_seconds: Schema.Int.pipe(Schema.between(1, 120)),
    resolution: Schema.optionalWith(Schema.Literal("480p", "720p", "1080p"), { default: () => "720p" as const })
  })
}

/** The request as documented: any provider of the platform's list (a runner may enable fewer). */
export const CreateTaskRequest = createTaskRequest(providerNames)
export type CreateTaskRequest = typeof CreateTaskRequest.Type

/** What a product backend (and later a browser) sees of a task: public fields only, plus where to follow from. */
export class TaskView extends Schema.Class<TaskView>("TaskView")({
  task_id: TaskId,
  project_id: ProjectId,
  task_version: Schema.Int,
  status: TaskStatus,
  stage: Stage,
  progress: Schema.NullOr(Progress),
  asset_id: Schema.NullOr(Schema.String),
  error_code: Schema.NullOr(PublicErrorCode),
  cursor: Schema.String.annotations({ description: "The stream cursor of this version: follow events after it" }),
  created_at: Schema.Date,
  updated_at: Schema.Date
}) {}

const IdempotencyHeaders = Schema.Struct({
  "idempotency-key": text(255).annotations({
    description: "Required: the same key returns the same task without a second reserve",
    message: () => ({ message: "must be 1 to 255 characters", override: true })
  })
})

export class TaskPageView extends Schema.Class<TaskPageView>("TaskPageView")({
  tasks: Schema.Array(TaskView),
  cursor: Schema.String.annotations({ description: "The stream cursor of this snapshot: follow events after it" }),
  next_before: Schema.NullOr(TaskId).annotations({ description: "Pass as ?before= for the next (older) page" })
}) {}

const PageQuery = Schema.Struct({
  limit: Schema.optionalWith(Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 200)), {
    default: () => 50
  }),
  before: Schema.optional(TaskId)
})

const ProjectPath = Schema.Struct({ project: ProjectId })
const TaskPath = Schema.Struct({ project: ProjectId, task: TaskId })

export class TasksApi extends HttpApiGroup.make("tasks")
  .add(
    HttpApiEndpoint.post("create", "/v1/projects/:project/tasks")
      .setPath(ProjectPath)
      .setHeaders(IdempotencyHeaders)
      .setPayload(CreateTaskRequest)
      .addSuccess(TaskView, { status: 201 })
      .addError(IdempotencyKeyReused)
      .addError(PayloadTooLarge)
      .addError(UnsupportedRequest)
      .addError(AdmissionsThrottled)
      .addError(ProjectNotFound)
      .addError(WriteFenced)
      .addError(StorageUnavailable)
  )
  .add(
    HttpApiEndpoint.get("list", "/v1/projects/:project/tasks")
      .setPath(ProjectPath)
      .setUrlParams(PageQuery)
      .addSuccess(TaskPageView)
      .addError(ProjectNotFound)
      .addError(StorageUnavailable)
  )
  .add(
    HttpApiEndpoint.get("get", "/v1/projects/:project/tasks/:task")
      .setPath(TaskPath)
      .addSuccess(TaskView)
      .addError(TaskNotFound)
      .addError(StorageUnavailable)
  )
  .add(
    HttpApiEndpoint.post("cancel", "/v1/projects/:project/tasks/:task/cancel")
      .setPath(TaskPath)
      .addSuccess(TaskView, { status: 202 })
      .addError(TaskNotFound)
      .addError(CommandRejected)
      .addError(VersionConflict)
      .addError(WriteFenced)
      .addError(TaskUnavailable)
      .addError(StorageUnavailable)
  )
  .middleware(Authentication)
{}
