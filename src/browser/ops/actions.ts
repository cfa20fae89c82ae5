import type { Result } from "./api.js"
import { say } from "./messages.js"

/** Refreshes every view after an action, so its effect shows at once (set by the page). */
let refreshAll: () => void = () => undefined
export const onAction = (refresh: () => void) => (refreshAll = refresh)

/**
 * Runs one operator action from a button: asks first when `confirmText` is given, disables the button while the
 * request is out (no double drain on a double click), says what happened in one line, then refreshes the views.
 */
export const act = async <A>(
  button: HTMLButtonElement,
  request: () => Promise<Result<A>>,
  done: (value: A) => string,
  confirmText?: string
): Promise<boolean> => {
  if (confirmText !== undefined && !window.confirm(confirmText)) return false
  button.disabled = true
  try {
    const result = await request()
    if (result.ok) say("ok", done(result.value))
    else say("error", result.failure.line, result.failure.status)
    return result.ok
  } finally {
    button.disabled = false
    refreshAll()
  }
}
