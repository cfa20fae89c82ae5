import { SYSTEM_MODES } from "../../domain/systemModeNames.js"
import { act } from "./actions.js"
import {
  type ApiFailure,
  type AuditChange,
  call,
  type DeadLetter,
  encodeSegment,
  type InboxRow,
  type ModeView,
  type Outbox,
  type Reconciliation,
  type Result,
  type ReviewTask
} from "./api.js"
import { $, age, ago, h, setText, syncRows } from "./dom.js"

/**
 * The mode and write epoch, the outbox, the dead-letter, inbox, review and reconciliation queues, and the audit:
 * refreshed every few seconds (they change on an operator's time scale, and some of them count rows).
 */

const body = (id: string) => $<HTMLTableSectionElement>(id)
const plural = (n: number, one: string) => `${n} ${one}${n === 1 ? "" : "s"}`

const renderMode = (m: ModeView) => {
  const mode = $("mode-value")
  mode.textContent = m.mode
  mode.dataset.mode = m.mode
  setText(document, "#mode-region", m.active_region)
  setText(document, "#mode-epoch", String(m.write_epoch))
  setText(document, "#mode-providers", m.degraded_providers.length === 0 ? "–" : m.degraded_providers.join(", "))
  setText(document, "#mode-updated", ago(m.updated_at))
  $("mode-updated").title = m.updated_at
}

const renderOutbox = (o: Outbox) => {
  setText(document, "#outbox-backlog", String(o.backlog))
  setText(document, "#outbox-age", o.oldest_age_seconds === null ? "–" : age(o.oldest_age_seconds))
  $("outbox").dataset.backlog = String(o.backlog)
  $("outbox").classList.toggle("warn", (o.oldest_age_seconds ?? 0) > 60)
}

const replayButton = (label: string, request: () => Promise<Result<{ replayed: number }>>, confirmText?: string) => {
  const button = h("button", { type: "button", class: "replay" }, label)
  button.onclick = () => act(button, request, (r) => `replayed ${plural(r.replayed, "row")}`, confirmText)
  return button
}

const deadLetterRow = (d: DeadLetter) =>
  h(
    "tr",
    {},
    h("td", { class: "mono" }, String(d.id)),
    h("td", { class: "mono", title: d.task_id }, d.task_id.slice(0, 8)),
    h("td", { class: "num attempts" }),
    h("td", { class: "error-text" }),
    h("td", { class: "when" }),
    h("td", {}, replayButton("Replay", () => call("POST", "/admin/dead-letters/replay", { id: d.id })))
  )

const inboxRow = (which: "dead" | "orphans") => (r: InboxRow) =>
  h(
    "tr",
    {},
    h("td", { class: "mono" }, String(r.id)),
    h("td", {}, r.provider),
    h("td", { class: "num attempts" }),
    h("td", { class: "error-text" }),
    h("td", { class: "when" }),
    h("td", {}, replayButton("Replay", () => call("POST", "/admin/inbox/replay", { id: String(r.id), which })))
  )

const updateQueueRow = (
  row: HTMLTableRowElement,
  r: { attempts: number; error: string | null; created_at?: string; received_at?: string }
) => {
  setText(row, ".attempts", String(r.attempts))
  setText(row, ".error-text", r.error ?? "")
  row.querySelector<HTMLElement>(".error-text")!.title = r.error ?? ""
  const at = r.created_at ?? r.received_at ?? null
  setText(row, ".when", ago(at))
  row.querySelector<HTMLElement>(".when")!.title = at ?? ""
}

const reviewRow = (t: ReviewTask) => {
  const as = h(
    "select",
    { class: "resolve-as", "aria-label": "resolve as" },
    ...["ready", "failed", "canceled"].map((v) => h("option", { value: v }, v))
  )
  const reason = h("input", { class: "reason", placeholder: "reason", "aria-label": "reason", size: "18" })
  const resolve = h("button", { type: "button", class: "resolve" }, "Resolve")
  resolve.onclick = () => {
    if (reason.value.trim() === "") return reason.focus()
    act(
      resolve,
      () =>
        call<{ status: string; version: number }>("POST", `/admin/review/${encodeSegment(t.task_id)}/resolve`, {
          as: as.value,
          reason: reason.value.trim()
        }),
      (r) => `task ${t.task_id} resolved: ${r.status} (v${r.version})`,
      `Resolve task ${t.task_id} as ${as.value}?`
    )
  }
  return h(
    "tr",
    { "data-task-id": t.task_id },
    h("td", { class: "mono", title: t.task_id }, t.task_id.slice(0, 8)),
    h("td", { class: "mono", title: `tenant ${t.tenant_id}\nproject ${t.project_id}` }, t.tenant_id.slice(0, 8)),
    h("td", {}, t.provider ?? "–"),
    h("td", { class: "status" }),
    h("td", { class: "when" }),
    h("td", { class: "error-text" }),
    h("td", { class: "actions" }, as, reason, resolve)
  )
}

const updateReviewRow = (row: HTMLTableRowElement, t: ReviewTask) => {
  setText(row, ".status", t.status)
  setText(row, ".when", ago(t.since))
  setText(row, ".error-text", t.reason ?? "")
  row.querySelector<HTMLElement>(".error-text")!.title = t.reason ?? ""
}

const reconciliationRow = (r: Reconciliation) => {
  const reason = h("input", { class: "reason", placeholder: "reason", "aria-label": "reason", size: "18" })
  const resolve = h("button", { type: "button", class: "resolve" }, "Resolve")
  resolve.onclick = () => {
    if (reason.value.trim() === "") return reason.focus()
    act(
      resolve,
      () =>
        call("POST", `/admin/reconciliations/${encodeSegment(r.id)}/resolve`, {
          reason: reason.value.trim()
        }),
      () => `reconciliation ${r.id} resolved`
    )
  }
  return h(
    "tr",
    {},
    h("td", { class: "mono" }, String(r.id)),
    h("td", { class: "mono", title: `task ${r.task_id}\nattempt ${r.attempt_id ?? "–"}` }, r.task_id.slice(0, 8)),
    h("td", { class: "error-text", title: r.reason }, r.reason),
    h("td", { class: "when" }),
    h("td", { class: "actions" }, reason, resolve)
  )
}

const auditRow = (c: AuditChange) =>
  h(
    "tr",
    {},
    h("td", { class: "when", title: c.at }),
    h("td", {}, c.operator),
    h("td", {}, c.what),
    h("td", { class: "mono change" }, `${c.from ?? "–"} → ${c.to ?? "–"}`),
    h("td", { class: "error-text", title: c.reason }, c.reason)
  )

const count = (id: string, n: number, more = false) => {
  const el = $(id)
  el.textContent = `${n}${more ? "+" : ""}`
  el.classList.toggle("nonzero", n > 0)
}

/** One refresh of every operations view; failed calls come back as lines, the rest is drawn. */
export const refreshOperations = async (): Promise<ReadonlyArray<ApiFailure>> => {
  const [mode, outbox, dead, inboxDead, orphans, review, reconciliations, audit] = await Promise.all([
    call<ModeView>("GET", "/admin/mode"),
    call<Outbox>("GET", "/admin/outbox"),
    call<{ rows: ReadonlyArray<DeadLetter> }>("GET", "/admin/dead-letters"),
    call<{ rows: ReadonlyArray<InboxRow> }>("GET", "/admin/inbox/dead"),
    call<{ rows: ReadonlyArray<InboxRow> }>("GET", "/admin/inbox/orphans"),
    call<{ tasks: ReadonlyArray<ReviewTask>; next_cursor: string | null }>("GET", "/admin/review"),
    call<{ rows: ReadonlyArray<Reconciliation> }>("GET", "/admin/reconciliations"),
    call<{ changes: ReadonlyArray<AuditChange> }>("GET", "/admin/audit")
  ])
  const failures: Array<ApiFailure> = []
  const section = (result: Result<unknown>, id: string, draw: () => void) => {
    $(id).classList.toggle("stale", !result.ok)
    if (result.ok) draw()
    else failures.push(result.failure)
  }
  section(mode, "mode", () => mode.ok && renderMode(mode.value))
  section(outbox, "outbox", () => outbox.ok && renderOutbox(outbox.value))
  section(dead, "dead-letters", () => {
    if (!dead.ok) return
    count("dead-letters-count", dead.value.rows.length)
    syncRows(body("dead-letters-rows"), dead.value.rows, (d) => String(d.id), deadLetterRow, updateQueueRow)
  })
  section(inboxDead, "inbox", () => {
    if (!inboxDead.ok) return
    count("inbox-dead-count", inboxDead.value.rows.length)
    syncRows(body("inbox-dead-rows"), inboxDead.value.rows, (r) => String(r.id), inboxRow("dead"), updateQueueRow)
  })
  section(orphans, "inbox", () => {
    if (!orphans.ok) return
    count("inbox-orphans-count", orphans.value.rows.length)
    syncRows(body("inbox-orphans-rows"), orphans.value.rows, (r) => String(r.id), inboxRow("orphans"), updateQueueRow)
  })
  section(review, "review", () => {
    if (!review.ok) return
    count("review-count", review.value.tasks.length, review.value.next_cursor !== null)
    syncRows(body("review-rows"), review.value.tasks, (t) => t.task_id, reviewRow, updateReviewRow)
  })
  section(reconciliations, "reconciliations", () => {
    if (!reconciliations.ok) return
    count("reconciliations-count", reconciliations.value.rows.length)
    syncRows(body("reconciliations-rows"), reconciliations.value.rows, (r) => String(r.id), reconciliationRow, (
      row,
      r
    ) => setText(row, ".when", ago(r.created_at)))
  })
  section(audit, "audit", () => {
    if (!audit.ok) return
    const latest = audit.value.changes.slice(0, 20)
    syncRows(
      body("audit-rows"),
      latest,
      (c) => `${c.at}|${c.what}|${c.to}`,
      auditRow,
      (row, c) => setText(row, ".when", ago(c.at))
    )
  })
  return failures
}

/** The mode control and the epoch bump: forms whose reason is required (it goes into the audit row). */
export const wireOperationForms = () => {
  const select = $<HTMLSelectElement>("mode-select")
  select.replaceChildren(...SYSTEM_MODES.map((m) => h("option", { value: m }, m)))
  const providersField = $("mode-providers-field")
  const showProviders = () => (providersField.hidden = select.value !== "DEGRADED_PROVIDER")
  select.onchange = showProviders
  showProviders()
  $<HTMLFormElement>("mode-form").onsubmit = (e) => {
    e.preventDefault()
    const reason = $<HTMLInputElement>("mode-reason")
    const providers = $<HTMLInputElement>("mode-providers-input").value.split(/[\s,]+/).filter((p) => p !== "")
    const mode = select.value
    const body = mode === "DEGRADED_PROVIDER" ? { mode, reason: reason.value.trim(), providers } : {
      mode,
      reason: reason.value.trim()
    }
    act(
      $<HTMLButtonElement>("mode-submit"),
      () => call<ModeView>("PUT", "/admin/mode", body),
      (m) => `mode is now ${m.mode}${m.degraded_providers.length > 0 ? ` (${m.degraded_providers.join(", ")})` : ""}`,
      `Switch the system to ${mode}?`
    ).then((ok) => ok && (reason.value = ""))
  }
  $<HTMLFormElement>("epoch-form").onsubmit = (e) => {
    e.preventDefault()
    const region = $<HTMLInputElement>("epoch-region").value.trim()
    const reason = $<HTMLInputElement>("epoch-reason")
    act(
      $<HTMLButtonElement>("epoch-submit"),
      () => call<ModeView>("POST", "/admin/epoch/bump", { region, reason: reason.value.trim() }),
      (m) => `write epoch is now ${m.write_epoch}, active region ${m.active_region}`,
      `Bump the write epoch to region ${region}? Writers on the old epoch are fenced.`
    ).then((ok) => ok && (reason.value = ""))
  }
  $("dead-letters-replay-all").replaceWith(
    replayButton(
      "Replay all",
      () => call("POST", "/admin/dead-letters/replay", { id: "all" }),
      "Replay every dead letter?"
    )
  )
  $("inbox-replay-all").replaceWith(
    replayButton(
      "Replay all dead",
      () => call("POST", "/admin/inbox/replay", { id: "all", which: "dead" }),
      "Replay every dead inbox row?"
    )
  )
}
