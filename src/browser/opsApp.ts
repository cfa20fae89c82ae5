import { onAction } from "./ops/actions.js"
import { type ApiFailure, call, token } from "./ops/api.js"
import { refreshCluster } from "./ops/clusterView.js"
import { $ } from "./ops/dom.js"
import { clearMessages, say } from "./ops/messages.js"
import { refreshOperations, wireOperationForms } from "./ops/operationsView.js"

/**
 * The operator page served at `/ops`: asks for an operator token (or, in development mode, fetches one), then keeps
 * the cluster views fresh about every second and the operation queues every five, while the tab is visible.
 * Bundled by the runner at start (src/http/admin/OpsPage.ts).
 */

const CLUSTER_EVERY_MS = 1_000
const OPERATIONS_EVERY_MS = 5_000

let session = 0

const setState = (state: "signed-out" | "signed-in") => {
  document.body.dataset.state = state
  $("signin").hidden = state === "signed-in"
  $("views").hidden = state === "signed-out"
  $("signout").hidden = state === "signed-out"
}

/** A failure of a poll is shown; a 401 means the token is no good (expired, revoked secret): back to the sign-in. */
const handle = (failures: ReadonlyArray<ApiFailure>): boolean => {
  for (const f of failures) say("error", f.line, f.status)
  if (failures.some((f) => f.status === 401)) {
    signOut("the operator token was refused: paste a new one")
    return false
  }
  return true
}

/**
 * A refresh loop: the next round is scheduled when this one has answered (a slow runner is never asked twice at
 * once), skipped while the tab is hidden, and ended by signing out (the session number changes).
 */
const loop = (every: number, refresh: () => Promise<ReadonlyArray<ApiFailure>>, stamp: string) => {
  const mine = session
  let timer: ReturnType<typeof setTimeout> | undefined
  let running = false
  let again = false
  const run = async () => {
    // asked while a round is out (an action's refresh): one more round right after it, never two at once
    if (running) return void (again = true)
    clearTimeout(timer)
    if (mine !== session) return
    running = true
    try {
      if (!document.hidden) {
        const failures = await refresh()
        if (mine !== session || !handle(failures)) return
        if (failures.length === 0) $(stamp).textContent = new Date().toLocaleTimeString([], { hour12: false })
      }
    } finally {
      running = false
    }
    if (again) {
      again = false
      return void run()
    }
    timer = setTimeout(run, every)
  }
  void run()
  return run
}

const signIn = async () => {
  const me = await call<{ operator: string }>("GET", "/admin/whoami")
  if (!me.ok) {
    say("error", me.failure.line, me.failure.status)
    if (me.failure.status === 401) token.clear()
    setState("signed-out")
    return
  }
  session++
  // the refusals from before this token are answered now
  document.querySelectorAll(`#messages li[data-status="401"]`).forEach((li) => li.remove())
  if ($("messages").children.length === 0) $("messages-box").hidden = true
  $("operator").textContent = me.value.operator
  $("signin-note").textContent = ""
  setState("signed-in")
  const cluster = loop(CLUSTER_EVERY_MS, refreshCluster, "cluster-updated")
  const operations = loop(OPERATIONS_EVERY_MS, refreshOperations, "operations-updated")
  onAction(() => {
    void cluster()
    void operations()
  })
}

function signOut(reason?: string) {
  session++
  token.clear()
  $("operator").textContent = "not signed in"
  setState("signed-out")
  if (reason !== undefined) $("signin-note").textContent = reason
}

const main = () => {
  wireOperationForms()
  $<HTMLFormElement>("signin").onsubmit = (e) => {
    e.preventDefault()
    const pasted = $<HTMLInputElement>("token").value.trim().replace(/^Bearer\s+/i, "")
    if (pasted === "") return
    token.set(pasted)
    $<HTMLInputElement>("token").value = ""
    void signIn()
  }
  const dev = document.getElementById("dev-token") as HTMLButtonElement | null
  if (dev !== null) {
    dev.onclick = async () => {
      token.clear()
      const issued = await call<{ token: string }>("POST", "/ops/dev-token")
      if (!issued.ok) return say("error", issued.failure.line, issued.failure.status)
      token.set(issued.value.token)
      void signIn()
    }
  }
  $("signout").onclick = () => signOut()
  $("messages-clear").onclick = clearMessages
  // back from a hidden tab: refresh at once rather than at the next tick
  document.addEventListener(
    "visibilitychange",
    () => !document.hidden && document.body.dataset.state === "signed-in" && signIn()
  )
  // with no token yet this asks anyway: the 401 says, in the page's own words, that a token is needed
  void signIn()
}

main()
