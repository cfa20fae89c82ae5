import { $, h } from "./dom.js"

/**
 * The page's message lines: every failed API call and every operator action, newest first, one readable line each.
 * A line that repeats (a poll failing every second) is counted on its existing line, moved to the top, instead of flooding the list.
 */

const KEEP = 12

export const say = (kind: "error" | "ok", line: string, status?: number) => {
  const list = $("messages")
  const time = new Date().toLocaleTimeString([], { hour12: false })
  const same = Array.from(list.children).find((li) => (li as HTMLElement).dataset.line === line) as
    | HTMLElement
    | undefined
  if (same !== undefined) {
    const times = Number(same.dataset.times ?? "1") + 1
    same.dataset.times = String(times)
    same.querySelector(".time")!.textContent = time
    same.querySelector(".times")!.textContent = ` ×${times}`
    list.prepend(same)
    return
  }
  const item = h(
    "li",
    { class: kind, "data-line": line, "data-status": status === undefined ? undefined : String(status) },
    h("span", { class: "time" }, time),
    " ",
    h("span", { class: "text" }, line),
    h("span", { class: "times" })
  )
  list.prepend(item)
  while (list.children.length > KEEP) list.lastElementChild!.remove()
  $("messages-box").hidden = false
}

export const clearMessages = () => {
  $("messages").replaceChildren()
  $("messages-box").hidden = true
}
