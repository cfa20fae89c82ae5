import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { Forbidden, ProjectLimitReached, StorageUnavailable, WriteFenced } from "../schema/errors.js"
import { ProjectId } from "../schema/ids.js"
import { Authentication } from "./Auth.js"

/** A project: one event stream of tasks, owned by the tenant that created it. */
export class ProjectView extends Schema.Class<ProjectView>("ProjectView")({
  project_id: ProjectId,
  created_at: Schema.Date
}) {}

export class ProjectList extends Schema.Class<ProjectList>("ProjectList")({
  projects: Schema.Array(ProjectView)
}) {}

/** Projects are created by their owner, with an id the server chooses: naming an unknown project id creates nothing. */
export class ProjectsApi extends HttpApiGroup.make("projects")
  .add(
    HttpApiEndpoint.post("create", "/v1/projects")
      .addSuccess(ProjectView, { status: 201 })
      .addError(ProjectLimitReached)
      .addError(Forbidden)
      .addError(WriteFenced)
      .addError(StorageUnavailable)
      .annotate(
        OpenApi.Description,
        "A new project of the caller's tenant (a token for every project of it, `*`), up to PROJECTS_PER_TENANT"
      )
  )
  .add(
    HttpApiEndpoint.get("list", "/v1/projects")
      .addSuccess(ProjectList)
      .addError(StorageUnavailable)
      .annotate(OpenApi.Description, "The caller's projects (those its token names, if it names some), oldest first")
  )
  .middleware(Authentication)
{}
