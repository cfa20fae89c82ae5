import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { ProjectNotFound, StorageUnavailable, Unauthorized } from "../schema/errors.js"
import { ProjectId, TenantId, UserId } from "../schema/ids.js"
import { Authentication } from "./Auth.js"

export class SessionView extends Schema.Class<SessionView>("SessionView")({
  tenant_id: TenantId,
  user_id: UserId,
  projects: Schema.Union(Schema.Literal("*"), Schema.Array(ProjectId)),
  development: Schema.Boolean
}) {}

export class StreamToken extends Schema.Class<StreamToken>("StreamToken")({
  token: Schema.String.annotations({ description: "Single use: ?stream_token= on the events URL, within expires_in" }),
  expires_in: Schema.Int
}) {}

const ProjectPath = Schema.Struct({ project: ProjectId })

/** Browser sessions (an HttpOnly cookie holding the access token) and single-use stream tokens. */
export class SessionApi extends HttpApiGroup.make("session")
  .add(
    HttpApiEndpoint.post("open", "/v1/session")
      .addSuccess(SessionView)
      .annotate(OpenApi.Description, "Sets the HttpOnly session cookie from the bearer token (browsers)")
  )
  .add(HttpApiEndpoint.get("current", "/v1/session").addSuccess(SessionView))
  .add(
    HttpApiEndpoint.post("streamToken", "/v1/projects/:project/stream-tokens")
      .setPath(ProjectPath)
      .addSuccess(StreamToken, { status: 201 })
      .addError(ProjectNotFound)
      .addError(StorageUnavailable)
  )
  .middlewareEndpoints(Authentication)
  .add(HttpApiEndpoint.del("close", "/v1/session").addSuccess(Schema.Void, { status: 204 }))
  .add(
    HttpApiEndpoint.post("development", "/v1/dev/session")
      .addSuccess(SessionView)
      .addError(Unauthorized)
      .addError(StorageUnavailable)
      .annotate(OpenApi.Description, "Development mode only (no AUTH_SECRET): a session as the development tenant")
  )
{}
