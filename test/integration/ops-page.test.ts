import { FetchHttpClient } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as http from "node:http"
import type { Page } from "playwright-core"
import { artifact, errorLinesOf, launchBrowser, noBrowser, READABLE_ERROR_LINE } from "../support/browser.js"
import { layerTestDatabase, noDatabase } from "../support/database.js"
import { scaled } from "../support/env.js"
import { freePort, layerTestRunner, quietLogs } from "../support/runner.js"
import { layerRunnerHttp } from "../support/simulator.js"
import { admitTask } from "../support/tasks.js"

/**
 * The operator page in development mode (no AUTH_SECRET, loopback only): it gets its operator token from the
 * development-only route, which answers this machine's own page only; then the operations half of the page, clicked
 * in Chromium: the mode switched with a reason (and audited under the operator's name), a dead letter replayed.
 * (The drain, with AUTH_SECRET and two runner processes, is test/integration/processes/ops-page.test.ts.)
 */

const httpPort = await Effect.runPromise(freePort)
const base = `http://127.0.0.1:${httpPort}`

const TestLayer = layerRunnerHttp(httpPort).pipe(
  Layer.provideMerge(layerTestRunner(layerTestDatabase())),
  Layer.provide(FetchHttpClient.layer),
  Layer.provide(quietLogs)
)

/** A POST to the development-token route naming `host` (and `origin`), raw: fetch sends neither as told. */
const postDevToken = (host: string, origin?: string) =>
  Effect.async<number>((resume) => {
    const headers: Record<string, string> = { host }
    if (origin !== undefined) headers["origin"] = origin
    const req = http.request({ host: "127.0.0.1", port: httpPort, method: "POST", path: "/ops/dev-token", headers })
    req.on("response", (res) => {
      res.resume()
      resume(Effect.succeed(res.statusCode ?? 0))
    })
    req.on("error", (e) => resume(Effect.die(e)))
    req.end()
  })

const inPage = <A>(f: (page: Page) => Promise<A>) => (page: Page) => Effect.promise(() => f(page))

describe.skipIf(noDatabase || noBrowser)("the operator page in development mode", () => {
  layer(TestLayer, { timeout: scaled(120_000), excludeTestServices: true })((it) => {
    it.effect("the development token is for this machine's own page only", () =>
      Effect.gen(function*() {
        const own = `127.0.0.1:${httpPort}`
        expect(yield* postDevToken(own)).toBe(200)
        expect(yield* postDevToken(own, `http://${own}`)).toBe(200)
        // a DNS-rebinding page names its own host; another site's page sends its own origin
        expect(yield* postDevToken(`rebound.example:${httpPort}`)).toBe(403)
        expect(yield* postDevToken(own, "http://evil.example")).toBe(403)
      }))

    it.effect("sign in with the development token; set the mode with a reason (audited), replay a dead letter", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        // a dead letter whose body is a real domain event (a task's first event, as the dispatcher would have kept it)
        const { taskId } = yield* admitTask()
        const [event] = yield* sql<{ event_id: string; payload: string }>`
          SELECT event_id, payload::text AS payload FROM outbox_events WHERE aggregate_id = ${taskId}`
        const [dead] = yield* sql<{ id: number }>`
          INSERT INTO notification_dead_letters (event_id, task_id, body, error, attempts)
          VALUES (${event!.event_id}, ${taskId}, ${event!.payload}, 'bus unavailable', 5) RETURNING id`

        const browser = yield* launchBrowser
        const page = yield* Effect.promise(() => browser.newPage({ viewport: { width: 1400, height: 900 } }))
        const pageErrors: Array<string> = []
        page.on("pageerror", (e) => pageErrors.push(e.message))
        page.on("dialog", (d) => void d.accept())
        yield* Effect.promise(() => page.goto(`${base}/ops`))
        yield* inPage((p) => p.click("#dev-token", { timeout: scaled(15_000) }))(page)
        yield* inPage((p) => p.waitForSelector(`#operator:text("development")`, { timeout: scaled(15_000) }))(page)
        expect(yield* inPage((p) => p.locator(`#messages li[data-status="401"]`).count())(page)).toBe(0)
        yield* inPage((p) => p.waitForSelector(`#runners tr[data-healthy="true"]`, { timeout: scaled(30_000) }))(page)
        yield* inPage((p) => p.waitForSelector(`#mode-value[data-mode="NORMAL"]`, { timeout: scaled(30_000) }))(page)

        // the mode: READ_ONLY with a reason, then back to NORMAL; both audited under the page's operator
        yield* inPage(async (p) => {
          await p.selectOption("#mode-select", "READ_ONLY")
          await p.fill("#mode-reason", "page test: storage maintenance")
          await p.click("#mode-submit")
          await p.waitForSelector(`#mode-value[data-mode="READ_ONLY"]`, { timeout: scaled(15_000) })
        })(page)
        const [fence] = yield* sql<{ mode: string }>`SELECT mode FROM region_write_fence`
        expect(fence!.mode).toBe("READ_ONLY")
        yield* inPage((p) =>
          p.waitForFunction(
            () => document.querySelector("#audit-rows")?.textContent?.includes("page test: storage maintenance"),
            undefined,
            { timeout: scaled(15_000) }
          )
        )(page)
        yield* inPage(async (p) => {
          await p.selectOption("#mode-select", "NORMAL")
          await p.fill("#mode-reason", "page test: done")
          await p.click("#mode-submit")
          await p.waitForSelector(`#mode-value[data-mode="NORMAL"]`, { timeout: scaled(15_000) })
        })(page)
        const audit = yield* sql<{ operator: string; reason: string }>`
          SELECT operator, reason FROM operator_audit WHERE reason LIKE 'page test:%' ORDER BY id`
        expect(audit.map((a) => [a.operator, a.reason])).toEqual([
          ["development", "page test: storage maintenance"],
          ["development", "page test: done"]
        ])
        // a mode change without a reason is not sent (the reason is audited)
        yield* inPage(async (p) => {
          await p.selectOption("#mode-select", "MAINTENANCE")
          await p.click("#mode-submit")
        })(page)
        expect(yield* inPage((p) => p.locator("#mode-value").getAttribute("data-mode"))(page)).toBe("NORMAL")

        // the dead letter is listed; Replay publishes it again and it leaves the list
        const row = `#dead-letters-rows tr[data-key="${dead!.id}"]`
        yield* inPage((p) => p.waitForSelector(row, { timeout: scaled(15_000) }))(page)
        yield* inPage((p) => p.screenshot({ path: artifact("ops-page-operations.png"), fullPage: true }))(page)
        yield* inPage((p) => p.click(`${row} button.replay`))(page)
        yield* inPage((p) =>
          p.waitForSelector(`#messages li.ok:has-text("replayed 1 row")`, { timeout: scaled(15_000) })
        )(
          page
        )
        yield* inPage((p) => p.waitForSelector(row, { state: "detached", timeout: scaled(15_000) }))(page)
        const [replayed] = yield* sql<{ replayed_at: Date | null }>`
          SELECT replayed_at FROM notification_dead_letters WHERE id = ${dead!.id}`
        expect(replayed!.replayed_at).not.toBeNull()

        // the 401 from before sign-in is gone with it; anything failing since was said in a readable line
        for (const line of yield* errorLinesOf(page)) expect(line).toMatch(READABLE_ERROR_LINE)
        expect(pageErrors).toEqual([])
      }).pipe(Effect.scoped))
  })
})
