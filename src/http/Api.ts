import { HttpApi, OpenApi } from "@effect/platform"
import { TasksApi } from "./TasksApi.js"

export class ControlPlaneApi extends HttpApi.make("control-plane")
  .add(TasksApi)
  .annotate(OpenApi.Title, "Task-status control plane")
  .annotate(OpenApi.Description, "Create, read and cancel AI-video generation tasks; follow their events.")
{}
