import { SqlClient } from "@effect/sql"
import { Effect, Metric } from "effect"
import * as S from "../config/Settings.js"
import { ProjectLimitReached } from "../schema/errors.js"
import type { ProjectId, TenantId } from "../schema/ids.js"
import { storageUnavailable } from "./storageUnavailable.js"
import { WriteFence } from "./WriteFence.js"

const unavailable = storageUnavailable("projects")

export const ProjectSettings = S.area("Projects", "who owns a project, and how many a tenant may create", {
  perTenant: S.integer(
    "PROJECTS_PER_TENANT",
    "projects a tenant may create with POST /v1/projects (403 past it)",
    1000,
    { min: 1 }
  )
})

export interface Project {
  readonly projectId: ProjectId
  readonly createdAt: Date
}

/** Projects created through the API (POST /v1/projects), counted by outcome. */
export const projectCreations = Metric.counter("project_creations", {
  description: "project creations through the API, by outcome (created, limit_reached)",
  incremental: true
})

/** The class of this service's advisory locks (two-key form: apart from the cluster's one-key shard locks). */
const LOCK_CLASS = 0x70726f6a

/**
 * A project is one event stream, owned by one tenant. It exists only once its owner created it: the id is the
 * server's (a random UUID), so no tenant can take an id another will use, and naming an unknown id (a read, a
 * task, a stream) creates nothing. Before, the first tenant to name an id owned it: a read of another tenant's
 * future project squatted it for good.
 */
export class Projects extends Effect.Service<Projects>()("Projects", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const { admitting } = yield* WriteFence
    const { perTenant } = yield* ProjectSettings.config

    const toProject = (row: { project_id: string; created_at: Date }): Project => ({
      projectId: row.project_id as ProjectId,
      createdAt: new Date(row.created_at)
    })

    const insert = (tenantId: TenantId, projectId: ProjectId) =>
      sql<{ project_id: string; created_at: Date }>`
        INSERT INTO projects (project_id, tenant_id, stream_epoch)
        VALUES (${projectId}, ${tenantId}, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
        ON CONFLICT (project_id) DO NOTHING
        RETURNING project_id, created_at`

    /** A new project of `tenantId`, unless it has `PROJECTS_PER_TENANT` already. */
    const create = Effect.fn("Projects.create")(
      function*(tenantId: TenantId) {
        yield* admitting()
        // one creation per tenant at a time: the count below and the insert see the same rows
        yield* sql`SELECT pg_advisory_xact_lock(${LOCK_CLASS}, hashtext(${tenantId}))`
        const [{ n }] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM projects WHERE tenant_id = ${tenantId}`
        if (n >= perTenant) {
          yield* Effect.logWarning("project limit reached: creation refused").pipe(
            Effect.annotateLogs({ tenant_id: tenantId, limit: perTenant })
          )
          yield* Metric.increment(Metric.tagged(projectCreations, "outcome", "limit_reached"))
          return yield* new ProjectLimitReached({
            message: `this tenant has its limit of ${perTenant} projects`,
            limit: perTenant
          })
        }
        const [row] = yield* insert(tenantId, crypto.randomUUID() as ProjectId)
        const project = toProject(row!)
        yield* Effect.logInfo("project created").pipe(
          Effect.annotateLogs({ tenant_id: tenantId, project_id: project.projectId })
        )
        yield* Metric.increment(Metric.tagged(projectCreations, "outcome", "created"))
        return project
      },
      sql.withTransaction,
      Effect.catchTag("SqlError", unavailable)
    )

    /** The tenant's projects, oldest first (at most PROJECTS_PER_TENANT of them). */
    const list = Effect.fn("Projects.list")(function*(tenantId: TenantId) {
      const rows = yield* sql<{ project_id: string; created_at: Date }>`
        SELECT project_id, created_at FROM projects WHERE tenant_id = ${tenantId}
        ORDER BY created_at, project_id LIMIT ${perTenant}`
      return rows.map(toProject)
    }, Effect.catchTag("SqlError", unavailable))

    /**
     * Makes sure `tenantId` owns a project with an id chosen by the caller: true when it does (now or already),
     * false when another tenant does. For the code's own fixed ids only (the development session's project, the
     * testing kit's), never for an id from a request: that is what let tenants squat each other's ids.
     */
    const ensure = Effect.fn("Projects.ensure")(function*(tenantId: TenantId, projectId: ProjectId) {
      yield* insert(tenantId, projectId)
      const rows = yield* sql<{ tenant_id: string }>`SELECT tenant_id FROM projects WHERE project_id = ${projectId}`
      return rows[0]?.tenant_id === tenantId
    }, Effect.catchTag("SqlError", unavailable))

    return { create, list, ensure } as const
  })
}) {}
