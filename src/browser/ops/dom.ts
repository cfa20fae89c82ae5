/**
 * DOM building for the operator page. Text from the API goes in as text nodes only, never as HTML: the page holds an
 * operator token, and a provider's error message or a reason typed by someone else must not run as script.
 */

export type Child = Node | string | number | null | undefined

export const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T

export const h = <K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attributes: Record<string, string | undefined> = {},
  ...children: ReadonlyArray<Child>
): HTMLElementTagNameMap[K] => {
  const el = document.createElement(tag)
  for (const [name, value] of Object.entries(attributes)) if (value !== undefined) el.setAttribute(name, value)
  for (const child of children) {
    if (child === null || child === undefined) continue
    el.append(typeof child === "number" ? String(child) : child)
  }
  return el
}

/**
 * Keeps a table body's rows in step with `items` by key: new rows are made once, existing rows only updated (so a
 * reason half typed into a row survives the next refresh), rows whose item is gone are removed. Order follows `items`.
 */
export const syncRows = <A>(
  body: HTMLTableSectionElement,
  items: ReadonlyArray<A>,
  key: (item: A) => string,
  create: (item: A) => HTMLTableRowElement,
  update: (row: HTMLTableRowElement, item: A) => void
) => {
  const existing = new Map<string, HTMLTableRowElement>()
  for (const row of Array.from(body.rows)) existing.set(row.dataset.key ?? "", row)
  const wanted = new Set<string>()
  let previous: HTMLTableRowElement | null = null
  for (const item of items) {
    const k = key(item)
    wanted.add(k)
    let row = existing.get(k)
    if (row === undefined) {
      row = create(item)
      row.dataset.key = k
    }
    update(row, item)
    const next: Element | null = previous === null ? body.firstElementChild : previous.nextElementSibling
    if (next !== row) body.insertBefore(row, next)
    previous = row
  }
  for (const [k, row] of existing) if (!wanted.has(k)) row.remove()
}

/** Sets a cell's text (by class) only when it changed, so the browser does not redraw a steady table. */
export const setText = (row: ParentNode, selector: string, text: string) => {
  const cell = row.querySelector(selector)
  if (cell !== null && cell.textContent !== text) cell.textContent = text
}

/** "42 s", "3 m 05 s", "2 h 07 m", "3 d 4 h": an age an operator reads at a glance. */
export const age = (seconds: number): string => {
  const s = Math.max(0, Math.floor(seconds))
  if (s < 60) return `${s} s`
  if (s < 3600) return `${Math.floor(s / 60)} m ${String(s % 60).padStart(2, "0")} s`
  if (s < 86400) return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")} m`
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`
}

/** How long ago an ISO time was, against the browser's clock ("" for no time). */
export const ago = (iso: string | null | undefined): string => {
  if (iso === null || iso === undefined) return ""
  const t = Date.parse(iso)
  return Number.isNaN(t) ? iso : `${age((Date.now() - t) / 1000)} ago`
}
