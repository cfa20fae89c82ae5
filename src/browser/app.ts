import { type ConnectionState, LiveClient, type TaskState } from "./LiveClient.js"

/** The live task page served at `/`: sign in, create tasks, watch them move. Bundled by the runner at start. */

interface Session {
  readonly projects: "*" | ReadonlyArray<string>
  readonly development: boolean
}

interface ProjectList {
  readonly projects: ReadonlyArray<{ readonly project_id: string }>
}

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T

const labels: Record<ConnectionState, string> = {
  connecting: "connecting…",
  live: "live",
  reconnecting: "reconnecting…",
  paused: "live updates paused"
}

const session = async (): Promise<Session | null> => {
  const current = await fetch("/v1/session", { credentials: "same-origin" })
  if (current.ok) return (await current.json()) as Session
  const dev = await fetch("/v1/dev/session", { method: "POST", credentials: "same-origin" })
  return dev.ok ? ((await dev.json()) as Session) : null
}

const signIn = (): Promise<Session> =>
  new Promise((resolve) => {
    $("signin").hidden = false
    $("signin").onsubmit = async (e) => {
      e.preventDefault()
      const token = $<HTMLInputElement>("token").value.trim()
      const res = await fetch("/v1/session", { method: "POST", headers: { authorization: `Bearer ${token}` } })
      if (!res.ok) return void ($("signin-error").textContent = "that token was not accepted")
      $("signin").hidden = true
      resolve((await res.json()) as Session)
    }
  })

/**
 * The project to show: `?project=`, the session's own (a scoped token, the development session), or, for a token
 * of every project of the tenant, the one this browser used last, another of the tenant's, or a new one (projects
 * are created by their owner: naming an unknown id finds nothing).
 */
const projectOf = async (s: Session): Promise<string> => {
  const asked = new URLSearchParams(location.search).get("project")
  if (asked !== null) return asked
  if (s.projects !== "*" && s.projects.length > 0) return s.projects[0]!
  const listed = await fetch("/v1/projects", { credentials: "same-origin" })
  const owned = listed.ok ? ((await listed.json()) as ProjectList).projects.map((p) => p.project_id) : []
  const remembered = localStorage.getItem("project")
  let project = remembered !== null && owned.includes(remembered) ? remembered : owned[0]
  if (project === undefined) {
    const created = await fetch("/v1/projects", { method: "POST", credentials: "same-origin" })
    if (!created.ok) throw new Error(`could not create a project (${created.status})`)
    project = ((await created.json()) as { project_id: string }).project_id
  }
  localStorage.setItem("project", project)
  return project
}

const row = (task: TaskState, received: ReadonlyArray<number>): HTMLTableRowElement => {
  let tr = document.querySelector<HTMLTableRowElement>(`tr[data-task-id="${task.task_id}"]`)
  if (tr === null) {
    tr = document.createElement("tr")
    tr.dataset.taskId = task.task_id
    tr.innerHTML = `<td class="id"></td><td class="status"></td><td class="stage"></td>` +
      `<td><progress max="100"></progress> <span class="pct"></span></td><td class="version"></td>`
    $("tasks").prepend(tr)
  }
  tr.dataset.status = task.status
  tr.dataset.version = String(task.task_version)
  tr.dataset.received = received.join(",")
  tr.querySelector(".id")!.textContent = task.task_id.slice(0, 8)
  const status = tr.querySelector<HTMLElement>(".status")!
  status.textContent = task.error_code === null ? task.status : `${task.status} (${task.error_code})`
  status.className = `status s-${task.status}`
  tr.querySelector(".stage")!.textContent = task.stage
  const done = task.status === "ready" ? 100 : task.progress ?? 0
  tr.querySelector("progress")!.value = done
  tr.querySelector(".pct")!.textContent = `${done}%`
  tr.querySelector(".version")!.textContent = `v${task.task_version}`
  return tr
}

const main = async () => {
  const s = (await session()) ?? (await signIn())
  const project = await projectOf(s)
  $("project").textContent = project
  const client: LiveClient = new LiveClient({
    project,
    onTasks: (changed) => changed.forEach((t) => row(t, client.received.get(t.task_id) ?? [])),
    onConnection: (state) => {
      const indicator = $("connection")
      indicator.textContent = labels[state]
      indicator.dataset.state = state
    }
  })
  ;(window as unknown as { liveClient: LiveClient }).liveClient = client

  $("create").onsubmit = async (e) => {
    e.preventDefault()
    const count = Number($<HTMLInputElement>("count").value) || 1
    const body = JSON.stringify({
      provider: $<HTMLSelectElement>("provider").value,
      // each option carries a model its provider accepts (the server's provider list renders them)
      model: $<HTMLSelectElement>("provider").selectedOptions[0]?.dataset.model ?? "",
      prompt: $<HTMLInputElement>("prompt").value || "a cat surfing at sunset",
      duration_seconds: Number($<HTMLInputElement>("duration").value) || 5
    })
    for (let i = 0; i < count; i++) {
      const res = await fetch(`/v1/projects/${project}/tasks`, {
        method: "POST",
        credentials: "same-origin",
        headers: { "content-type": "application/json", "idempotency-key": crypto.randomUUID() },
        body
      })
      if (res.ok) client.apply([(await res.json()) as TaskState])
      else $("create-error").textContent = `could not create a task (${res.status})`
    }
  }
  await client.start()
}

main()
