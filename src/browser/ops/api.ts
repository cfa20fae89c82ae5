/**
 * The admin API as the operator page sees it: plain fetch with the operator's bearer token (kept in sessionStorage:
 * it dies with the tab), a deadline on every call, and every failure turned into one readable line.
 * The shapes are the admin API contract's JSON (snake_case), as the endpoints encode them.
 */
import type { RunnerStatus } from "../../cluster/ClusterView.js"

/** A runner as GET /admin/cluster answers it: the server's own type (a type-only import, nothing bundled). */
export type RunnerView = RunnerStatus
export interface ClusterStatus {
  readonly runners: ReadonlyArray<RunnerView>
  readonly shards_per_group: number
  readonly groups: ReadonlyArray<string>
}
export interface ShardView {
  readonly group: string
  readonly id: number
  readonly runner: string | null
}
export interface ShardMap {
  readonly shards: ReadonlyArray<ShardView>
}
export interface ModeView {
  readonly mode: string
  readonly active_region: string
  readonly write_epoch: number
  readonly updated_at: string
  readonly degraded_providers: ReadonlyArray<string>
}
export interface AuditChange {
  readonly at: string
  readonly operator: string
  readonly what: string
  readonly from: string | null
  readonly to: string | null
  readonly reason: string
}
export interface Outbox {
  readonly backlog: number
  readonly oldest_age_seconds: number | null
}
export interface InboxRow {
  readonly id: number
  readonly provider: string
  readonly received_at: string
  readonly attempts: number
  readonly error: string | null
}
export interface DeadLetter {
  readonly id: number
  readonly event_id: string
  readonly task_id: string
  readonly attempts: number
  readonly error: string | null
  readonly created_at: string
}
export interface ReviewTask {
  readonly task_id: string
  readonly tenant_id: string
  readonly project_id: string
  readonly provider: string | null
  readonly status: string
  readonly since: string
  readonly reason: string | null
}
export interface Reconciliation {
  readonly id: number
  readonly task_id: string
  readonly attempt_id: string | null
  readonly reason: string
  readonly created_at: string
}

const TOKEN_KEY = "ops_token"
const DEADLINE_MS = 10_000

export const token = {
  get: (): string | null => sessionStorage.getItem(TOKEN_KEY),
  set: (value: string) => sessionStorage.setItem(TOKEN_KEY, value),
  clear: () => sessionStorage.removeItem(TOKEN_KEY)
}

/** A call that did not succeed: the HTTP status (0: no answer) and the line the page shows. */
export class ApiFailure {
  constructor(readonly status: number, readonly line: string) {}
}

export type Result<A> = { readonly ok: true; readonly value: A } | { readonly ok: false; readonly failure: ApiFailure }

const statusText: Record<number, string> = {
  400: "Bad Request",
  401: "Unauthorized",
  403: "Forbidden",
  404: "Not Found",
  409: "Conflict",
  422: "Unprocessable",
  500: "Internal Server Error",
  502: "Bad Gateway",
  503: "Service Unavailable",
  504: "Gateway Timeout"
}

/**
 * What the server said, in one line: a tagged error's message (with its tag when the tag says more than the status
 * name already does), or the start of a text body; and the trace id the answer names (to find its log lines).
 */
const explain = (body: string, name: string): { readonly said: string; readonly trace: string } => {
  try {
    const json = JSON.parse(body) as { _tag?: unknown; message?: unknown; error?: unknown; trace_id?: unknown }
    const message = typeof json.message === "string" && json.message.length > 0
      ? json.message
      : typeof json.error === "string"
      ? json.error
      : undefined
    const tag = typeof json._tag === "string" && json._tag !== name.replace(/ /g, "") ? json._tag : undefined
    const said = message === undefined ? tag ?? body : tag === undefined ? message : `${tag}: ${message}`
    return { said, trace: typeof json.trace_id === "string" ? ` (trace ${json.trace_id})` : "" }
  } catch {
    return { said: body.replace(/\s+/g, " ").trim(), trace: "" }
  }
}

/** One request to the admin API; never throws: a refusal, an error status, a timeout or no answer is a failure. */
export const call = async <A>(method: string, path: string, body?: unknown): Promise<Result<A>> => {
  const what = `${method} ${path}`
  const headers: Record<string, string> = { accept: "application/json" }
  const bearer = token.get()
  if (bearer !== null) headers["authorization"] = `Bearer ${bearer}`
  if (body !== undefined) headers["content-type"] = "application/json"
  let res: Response
  try {
    res = await fetch(path, {
      method,
      headers,
      body: body === undefined ? null : JSON.stringify(body),
      credentials: "omit",
      signal: AbortSignal.timeout(DEADLINE_MS)
    })
  } catch (e) {
    const reason = e instanceof DOMException && e.name === "TimeoutError"
      ? `no answer within ${DEADLINE_MS / 1000} s`
      : `the runner did not answer (${e instanceof Error ? e.message : String(e)})`
    return { ok: false, failure: new ApiFailure(0, `${what}: ${reason}`) }
  }
  const text = await res.text().catch(() => "")
  if (!res.ok) {
    const name = statusText[res.status] ?? res.statusText
    const { said, trace } = explain(text, name)
    const hint = res.status === 401 && bearer === null ? " (no token sent: paste an operator token)" : ""
    const line = `${what} → ${res.status} ${name}${said === "" ? "" : `: ${said.slice(0, 300)}`}${hint}${trace}`
    return { ok: false, failure: new ApiFailure(res.status, line) }
  }
  if (text === "") return { ok: true, value: undefined as A }
  try {
    return { ok: true, value: JSON.parse(text) as A }
  } catch {
    return { ok: false, failure: new ApiFailure(res.status, `${what}: the answer is not JSON`) }
  }
}

export const encodeSegment = (value: string | number) => encodeURIComponent(String(value))
