import * as HttpApi from "@effect/platform/HttpApi"
import * as OpenApi from "@effect/platform/OpenApi"
import { AdminApi } from "./admin/AdminApi.js"
import { BreakersApi } from "./admin/BreakersApi.js"
import { ClusterApi } from "./admin/ClusterApi.js"
import { LateResultsApi } from "./admin/LateResultsApi.js"
import { OperationsApi } from "./admin/OperationsApi.js"
import { OutputsApi } from "./admin/OutputsApi.js"
import { RedisApi } from "./admin/RedisApi.js"
import { TokensApi } from "./admin/TokensApi.js"
import { ProjectsApi } from "./ProjectsApi.js"
import { SessionApi } from "./SessionApi.js"
import { TasksApi } from "./TasksApi.js"

export class ControlPlaneApi extends HttpApi.make("control-plane")
  .add(ProjectsApi)
  .add(TasksApi)
  .add(SessionApi)
  .add(AdminApi)
  .add(ClusterApi)
  .add(OperationsApi)
  .add(OutputsApi)
  .add(RedisApi)
  .add(LateResultsApi)
  .add(TokensApi)
  .add(BreakersApi)
  .annotate(OpenApi.Title, "Task-status control plane")
  .annotate(OpenApi.Description, "Create, read and cancel AI-video generation tasks; follow their events.")
{}
