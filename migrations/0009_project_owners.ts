import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Projects are created by their owner (POST /v1/projects), with ids the server chooses, and capped per tenant: the
 * cap counts a tenant's projects, and the owner lists them, by this index. (Rows made before, by reads naming an id,
 * stay with the tenant that named them.)
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE INDEX idx_projects_tenant ON projects (tenant_id, created_at)`
})
