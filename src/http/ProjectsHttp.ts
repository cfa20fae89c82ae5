import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Effect } from "effect"
import { type Project, Projects } from "../persistence/Projects.js"
import { Forbidden } from "../schema/errors.js"
import { ControlPlaneApi } from "./Api.js"
import { canSee, Principal } from "./Auth.js"
import { ProjectList, ProjectView } from "./ProjectsApi.js"

const toView = (p: Project) => new ProjectView({ project_id: p.projectId, created_at: p.createdAt })

export const ProjectsHttpLive = HttpApiBuilder.group(ControlPlaneApi, "projects", (handlers) =>
  Effect.gen(function*() {
    const projects = yield* Projects
    return handlers
      .handle("create", () =>
        Effect.gen(function*() {
          const principal = yield* Principal
          // a token narrowed to some projects (a browser's, a stream's) is not the tenant's: it makes none
          if (principal.projects !== "*") {
            return yield* new Forbidden({ message: "a token scoped to some projects cannot create projects" })
          }
          return toView(yield* projects.create(principal.tenantId))
        }))
      .handle("list", () =>
        Effect.gen(function*() {
          const principal = yield* Principal
          const owned = yield* projects.list(principal.tenantId)
          return new ProjectList({ projects: owned.filter((p) => canSee(principal, p.projectId)).map(toView) })
        }))
  }))
