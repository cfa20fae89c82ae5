import { FetchHttpClient } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { afterAll, describe, expect, layer } from "@effect/vitest"
import { Duration, Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { SESSION_COOKIE, TokenSigner } from "../../src/http/Auth.js"
import type { TenantId, UserId } from "../../src/schema/ids.js"
import { simulatorEnv } from "../../src/simulator/embedded.js"
import { artifact, launchBrowser, noBrowser } from "../support/browser.js"
import { layerTestDatabase, noDatabase } from "../support/database.js"
import { scaled } from "../support/env.js"
import { until } from "../support/propagation.js"
import { freePort, layerTestRunner, quietLogs, withSettings } from "../support/runner.js"
import { layerRunnerHttp, layerSim, Sim } from "../support/simulator.js"
import { uuid } from "../support/tasks.js"
import { startTcpProxy } from "../support/tcpProxy.js"

/**
 * The live task page in a real browser (Debian's Chromium driven by playwright-core): it signs in (development
 * session), creates tasks against the provider simulator, and shows them move to ready over SSE — across a cut of
 * every connection between the browser and the runner.
 */

const [httpPort, simPort] = await Effect.runPromise(Effect.all([freePort, freePort]))
const platform = `http://127.0.0.1:${httpPort}`
const sim = `http://127.0.0.1:${simPort}`
const objects = fs.mkdtempSync(path.join(os.tmpdir(), "browser-objects-"))
afterAll(() => fs.rmSync(objects, { recursive: true, force: true }))
const settings = {
  ...simulatorEnv(platform, sim, ["openai"]),
  POLL_INTERVAL_SCALE: "0.05",
  OBJECT_STORE_DIR: objects,
  REDIS_KEY_PREFIX: `test-${uuid()}:`,
  SSE_HEARTBEAT: "1 second"
}

const TestLayer = layerSim(simPort, platform).pipe(
  Layer.provideMerge(
    layerRunnerHttp(httpPort).pipe(Layer.provideMerge(layerTestRunner(layerTestDatabase(), { lifecycle: true })))
  ),
  Layer.provide(FetchHttpClient.layer),
  Layer.provide(quietLogs),
  Layer.provide(withSettings(settings))
)

describe.skipIf(noDatabase || noBrowser)("the live task page in Chromium", () => {
  layer(TestLayer, { timeout: scaled(180_000), excludeTestServices: true })((it) => {
    it.effect("create tasks, watch them reach ready, cut the stream mid-way: it resumes with no missed transition", () =>
      Effect.gen(function*() {
        const simulator = yield* Sim
        yield* simulator.setFaults({ jobDurationMs: 8000, outcomes: { succeeded: 1, failed: 0, canceled: 0 } })
        // the browser reaches the runner through a proxy, so the test can cut every connection at once
        const proxy = yield* Effect.acquireRelease(
          Effect.promise(() => startTcpProxy(httpPort)),
          (p) => Effect.promise(() => p.close())
        )
        const browser = yield* launchBrowser
        const page = yield* Effect.promise(() => browser.newPage())
        const consoleErrors: Array<string> = []
        page.on("pageerror", (e) => consoleErrors.push(e.message))
        yield* Effect.promise(() => page.goto(`http://127.0.0.1:${proxy.port}/`))
        const waitFor = (selector: string, timeout = 30_000) =>
          Effect.promise(() => page.waitForSelector(selector, { timeout: scaled(timeout) }))
        yield* waitFor(`#connection[data-state="live"]`)

        yield* Effect.promise(async () => {
          await page.selectOption("#provider", "openai")
          await page.fill("#count", "3")
          await page.click("#create-button")
        })
        yield* Effect.promise(() =>
          page.waitForFunction(() => document.querySelectorAll("tr[data-task-id]").length === 3)
        )
        // mid-way: once a task is running at the provider, drop every connection and refuse new ones until the page
        // has tried to come back at least once
        yield* waitFor(`tr[data-status="running"], tr[data-status="submitted"]`)
        proxy.pause()
        yield* waitFor(`#connection[data-state="reconnecting"], #connection[data-state="paused"]`, 10_000)
        const refusedBefore = proxy.refused()
        yield* until("a refused reconnect", () => proxy.refused() > refusedBefore, Duration.seconds(30))
        proxy.resume()
        yield* waitFor(`#connection[data-state="live"]`, 60_000)
        yield* Effect.promise(() =>
          page.waitForFunction(
            () =>
              Array.from(document.querySelectorAll("tr[data-task-id]")).every((tr) =>
                tr.getAttribute("data-status") === "ready"
              ),
            undefined,
            { timeout: scaled(90_000) }
          )
        )
        yield* Effect.promise(() => page.screenshot({ path: artifact("live-page.png"), fullPage: true }))

        // every version each task went through reached the page from the stream, in order, none missing
        const seen = yield* Effect.promise(() =>
          page.evaluate(() => {
            const client = (window as unknown as {
              liveClient: { received: Map<string, Array<number>>; resets: number; connections: number }
            }).liveClient
            return { received: [...client.received.entries()], resets: client.resets, connections: client.connections }
          })
        )
        expect(seen.connections).toBeGreaterThanOrEqual(2) // it did reconnect
        expect(seen.resets).toBe(0)
        const sql = yield* SqlClient.SqlClient
        expect(seen.received).toHaveLength(3)
        for (const [taskId, versions] of seen.received) {
          const [row] = yield* sql<{ version: number; status: string }>`
            SELECT version, status FROM generation_tasks WHERE id = ${taskId}`
          expect(row!.status).toBe("ready")
          expect(versions).toEqual(Array.from({ length: Number(row!.version) }, (_, i) => i + 1))
        }
        expect(consoleErrors).toEqual([])
      }).pipe(Effect.scoped))

    it.effect("when the stream keeps failing it says \"live updates paused\", polls snapshots, and resumes by cursor", () =>
      Effect.gen(function*() {
        const simulator = yield* Sim
        yield* simulator.setFaults({ jobDurationMs: 1500, outcomes: { succeeded: 1, failed: 0, canceled: 0 } })
        const browser = yield* launchBrowser
        const page = yield* Effect.promise(() => browser.newPage())
        yield* Effect.promise(() => page.goto(`${platform}/`))
        const waitFor = (selector: string, timeout = 30_000) =>
          Effect.promise(() => page.waitForSelector(selector, { timeout: scaled(timeout) }))
        yield* waitFor(`#connection[data-state="live"]`)
        // every stream request now fails (a proxy that drops long-lived connections, say); snapshots still work
        yield* Effect.promise(() => page.route("**/events*", (route) => route.abort()))
        const before = yield* Effect.promise(() => page.locator("tr[data-task-id]").count())
        // the open stream fails too (as when its connection drops): the client reconnects, and keeps failing
        yield* Effect.promise(() =>
          page.evaluate(() => {
            const client = (window as unknown as { liveClient: { source: EventSource | null } }).liveClient
            client.source?.dispatchEvent(new Event("error"))
          })
        )
        yield* waitFor(`#connection[data-state="paused"]`, 30_000)
        yield* Effect.promise(async () => {
          await page.selectOption("#provider", "openai")
          await page.fill("#count", "1")
          await page.click("#create-button")
        })
        // the snapshot poll (every 10–30 s) brings the new task to ready without any stream
        yield* Effect.promise(() =>
          page.waitForFunction(
            (n) =>
              document.querySelectorAll("tr[data-task-id]").length === n + 1 &&
              document.querySelector("tr[data-task-id]")!.getAttribute("data-status") === "ready",
            before,
            { timeout: scaled(45_000) }
          )
        )
        yield* Effect.promise(() => page.unroute("**/events*"))
        yield* waitFor(`#connection[data-state="live"]`, 60_000)
      }).pipe(Effect.scoped))

    it.effect("signed in for every project of a tenant, the page makes the tenant's first project, then keeps to it", () =>
      Effect.gen(function*() {
        const tenant = uuid()
        const token = yield* Effect.flatMap(
          TokenSigner,
          (s) => s.sign({ tenant_id: tenant as TenantId, sub: uuid() as UserId, projects: "*" })
        )
        const browser = yield* launchBrowser
        const page = yield* Effect.promise(async () => {
          const context = await browser.newContext()
          await context.addCookies([{ name: SESSION_COOKIE, value: token, url: platform }])
          return context.newPage()
        })
        const shown = Effect.promise(async () => {
          await page.goto(`${platform}/`)
          await page.waitForSelector(`#connection[data-state="live"]`, { timeout: scaled(30_000) })
          return page.locator("#project").textContent()
        })
        const first = yield* shown
        const again = yield* shown
        const sql = yield* SqlClient.SqlClient
        const owned = yield* sql<{ project_id: string }>`SELECT project_id FROM projects WHERE tenant_id = ${tenant}`
        expect(owned.map((p) => p.project_id)).toEqual([first])
        expect(again).toBe(first)
      }).pipe(Effect.scoped))
  })
})
