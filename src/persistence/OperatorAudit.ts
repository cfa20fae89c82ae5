import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { storageUnavailable } from "./storageUnavailable.js"

export interface AuditEntry {
  readonly operator: string
  /** what changed: mode, epoch, stream-epoch, review.resolve, inbox.replay, dead-letters.replay, reconciliation.resolve, breaker.reset */
  readonly what: string
  /** the task, row or region it was about, if any */
  readonly subject?: string | null
  readonly from: string | null
  readonly to: string | null
  readonly reason: string
}

export interface AuditRow {
  readonly at: Date
  readonly operator: string
  readonly what: string
  readonly subject: string | null
  readonly from: string | null
  readonly to: string | null
  readonly reason: string
}

/** The operator_audit table: who did what, when, from → to, and why. Written in the transaction of the change. */
export class OperatorAudit extends Effect.Service<OperatorAudit>()("OperatorAudit", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const record = (e: AuditEntry) =>
      sql`
        INSERT INTO operator_audit (operator, what, subject, from_value, to_value, reason)
        VALUES (${e.operator}, ${e.what}, ${e.subject ?? null}, ${e.from}, ${e.to}, ${e.reason})`.pipe(Effect.asVoid)
    const recent = (limit: number) =>
      sql<AuditRow>`
        SELECT at, operator, what, subject, from_value AS "from", to_value AS "to", reason FROM operator_audit
        ORDER BY at DESC, id DESC LIMIT ${limit}`.pipe(Effect.catchTag("SqlError", storageUnavailable("audit")))
    return { record, recent } as const
  })
}) {}
