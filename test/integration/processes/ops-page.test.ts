import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as http from "node:http"
import type { Page } from "playwright-core"
import { TokenSigner } from "../../../src/http/Auth.js"
import type { TenantId, UserId } from "../../../src/schema/ids.js"
import { artifact, errorLinesOf, launchBrowser, noBrowser, READABLE_ERROR_LINE } from "../../support/browser.js"
import { makeTestDatabaseUrl, noDatabase } from "../../support/database.js"
import { scaled } from "../../support/env.js"
import { spawnRunner, waitForHttp } from "../../support/processes.js"
import { freePort, withSettings } from "../../support/runner.js"
import { uuid } from "../../support/tasks.js"

const AUTH_SECRET = "ops-page-test-secret-0123456789abcdefgh"

/**
 * The operator page (`/ops`) in Chromium against two runner processes on one PostgreSQL database, with AUTH_SECRET
 * set: without a token, or with a tenant's, every call is refused and the page says so in a line; with an operator
 * token it shows both runners and the shard map, and a drain clicked on the page moves the runner's shards to the
 * other one before the page's eyes (then undrain brings them back). Screenshots: test-artifacts/ops-page-*.png.
 */

const signed = <A>(f: (s: TokenSigner) => Effect.Effect<A>) =>
  Effect.flatMap(TokenSigner, f).pipe(
    Effect.provide(TokenSigner.Default.pipe(Layer.provide(withSettings({ AUTH_SECRET }))))
  )

/**
 * A runner process on `url`, with AUTH_SECRET; started again on other ports when one of its ports was taken between
 * being handed out and bound (test runs of other worktrees on this machine draw from the same block).
 */
const startRunner = (url: string, operatorToken: string) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      for (let attempt = 1;; attempt++) {
        const [httpPort, runnerPort] = await Effect.runPromise(Effect.all([freePort, freePort]))
        const proc = spawnRunner({
          DATABASE_URL: url,
          ROCKETMQ_ENDPOINTS: "",
          AUTH_SECRET,
          HTTP_PORT: String(httpPort),
          RUNNER_PORT: String(runnerPort),
          LOG_LEVEL: "Error"
        })
        try {
          await waitForHttp(httpPort, proc)
          // the answer came from this runner, not from another test's that holds the port: only this file's secret
          // verifies this operator token
          const whoami = await fetch(`http://127.0.0.1:${httpPort}/admin/whoami`, {
            headers: { authorization: `Bearer ${operatorToken}` }
          })
          if (whoami.status !== 200) throw new Error(`port ${httpPort} is another runner's (whoami ${whoami.status})`)
          return { ...proc, httpPort, address: `127.0.0.1:${runnerPort}` }
        } catch (e) {
          proc.child.kill("SIGKILL")
          const taken = proc.output().includes("EADDRINUSE") || String(e).includes("another runner's")
          if (attempt < 3 && taken) continue
          throw e
        }
      }
    }),
    (proc, exit) =>
      Effect.sync(() => {
        // a failed test shows what the runner said (it may have exited)
        if (exit._tag === "Failure") {
          console.error(`runner ${proc.address} (exit ${proc.child.exitCode}):\n${proc.output()}`)
        }
        proc.child.kill("SIGKILL")
      })
  )

/**
 * Waits, in the page, until `predicate(arg)` holds (the page's DOM, re-checked on every animation frame); when it
 * does not within `timeout`, the failure names `what` and the page is kept as test-artifacts/ops-page-failed.png.
 */
const waitInPage = <A>(page: Page, what: string, predicate: (arg: A) => boolean, arg: A, timeout: number) =>
  Effect.promise(async () => {
    try {
      // the argument is plain JSON (strings, numbers, arrays of them): it reaches the page as it is
      await page.waitForFunction(predicate as (arg: unknown) => boolean, arg, { timeout: scaled(timeout) })
    } catch (e) {
      await page.screenshot({ path: artifact("ops-page-failed.png"), fullPage: true }).catch(() => undefined)
      throw new Error(`the page never showed ${what}: ${String(e)}`)
    }
  })

/** How many shard squares the page paints in `runner`'s color (by the runner each square says holds it). */
const paintedFor = (page: Page, runner: string) =>
  Effect.promise(() => page.evaluate((r) => document.querySelectorAll(`.shard[data-runner="${r}"]`).length, runner))

/** A POST to the development-token route as a client naming `host` (raw: fetch will not send another Host). */
const postDevToken = (port: number, host: string) =>
  Effect.async<number>((resume) => {
    const req = http.request({ host: "127.0.0.1", port, method: "POST", path: "/ops/dev-token", headers: { host } })
    req.on("response", (res) => {
      res.resume()
      resume(Effect.succeed(res.statusCode ?? 0))
    })
    req.on("error", (e) => resume(Effect.die(e)))
    req.end()
  })

/** Signs in on the page with a pasted token. */
const paste = (page: Page, token: string) =>
  Effect.promise(async () => {
    await page.locator("#messages-clear").click()
    await page.fill("#token", token)
    await page.press("#token", "Enter")
  })

const REFUSED = `#messages li.error[data-status="401"]`

const openOps = (base: string) =>
  Effect.gen(function*() {
    const browser = yield* launchBrowser
    const page = yield* Effect.promise(() => browser.newPage({ viewport: { width: 1400, height: 900 } }))
    const pageErrors: Array<string> = []
    page.on("pageerror", (e) => pageErrors.push(e.message))
    page.on("dialog", (d) => void d.accept())
    yield* Effect.promise(() => page.goto(`${base}/ops`))
    return { page, pageErrors }
  })

describe.skipIf(noDatabase || noBrowser)("the operator page against runner processes (AUTH_SECRET set)", () => {
  it.live(
    "no token, or a tenant's token: every call refused, shown as a readable 401 line; no development route",
    () =>
      Effect.gen(function*() {
        const { url } = yield* makeTestDatabaseUrl
        const a = yield* startRunner(url, yield* signed((s) => s.signOperator("page-test")))
        const base = `http://127.0.0.1:${a.httpPort}`

        // AUTH_SECRET is set: the development-token route does not exist (not merely refusing), whoever asks
        expect(yield* postDevToken(a.httpPort, `127.0.0.1:${a.httpPort}`)).toBe(404)
        // the page itself holds no data and needs no token
        expect((yield* Effect.promise(() => fetch(`${base}/ops`))).status).toBe(200)

        const { page, pageErrors } = yield* openOps(base)
        // no token: the page asked anyway, and shows the 401 as one line; no development button here
        yield* Effect.promise(() => page.waitForSelector(REFUSED, { timeout: scaled(15_000) }))
        expect(yield* Effect.promise(() => page.locator(REFUSED).first().textContent())).toContain(
          "GET /admin/whoami → 401 Unauthorized: invalid or expired operator token (no token sent: paste an operator token)"
        )
        expect(yield* Effect.promise(() => page.locator("#dev-token").count())).toBe(0)
        expect(yield* Effect.promise(() => page.locator("#views").isHidden())).toBe(true)

        // a tenant's token (valid for the tenants' API) is refused here, in words
        const tenantToken = yield* signed((s) =>
          s.sign({ tenant_id: uuid() as TenantId, sub: uuid() as UserId, projects: "*" })
        )
        expect(
          (yield* Effect.promise(() =>
            fetch(`${base}/v1/projects`, { headers: { authorization: `Bearer ${tenantToken}` } })
          )).status
        ).toBe(200)
        yield* paste(page, tenantToken)
        yield* Effect.promise(() => page.waitForSelector(REFUSED, { timeout: scaled(15_000) }))
        expect(yield* Effect.promise(() => page.locator(REFUSED).first().textContent())).toContain(
          "GET /admin/whoami → 401 Unauthorized: invalid or expired operator token"
        )
        expect(yield* Effect.promise(() => page.locator("body").getAttribute("data-state"))).toBe("signed-out")
        expect(yield* Effect.promise(() => page.evaluate(() => sessionStorage.getItem("ops_token")))).toBeNull()
        yield* Effect.promise(() => page.screenshot({ path: artifact("ops-page-refused.png") }))
        expect(pageErrors).toEqual([])
      }).pipe(Effect.scoped),
    scaled(180_000)
  )

  it.live(
    "an operator token shows both runners and the shard map; a drain clicked on the page moves the shards to the other runner, undrain brings them back",
    () =>
      Effect.gen(function*() {
        const { url } = yield* makeTestDatabaseUrl
        // one at a time: the first creates @effect/cluster's tables
        const operatorToken = yield* signed((s) => s.signOperator("page-test"))
        const a = yield* startRunner(url, operatorToken)
        const b = yield* startRunner(url, operatorToken)
        const base = `http://127.0.0.1:${a.httpPort}`
        const { page, pageErrors } = yield* openOps(base)
        yield* Effect.promise(() => page.waitForSelector(REFUSED, { timeout: scaled(15_000) }))

        // an operator token: both runners, healthy, and every shard painted in one of their colors
        yield* paste(page, operatorToken)
        yield* Effect.promise(() => page.waitForSelector(`#operator:text("page-test")`, { timeout: scaled(15_000) }))
        const runners = [a.address, b.address]
        yield* waitInPage(
          page,
          "both runners healthy, every shard held by one of them",
          (addresses) =>
            addresses.every((address) =>
              document.querySelector(`#runners tr[data-address="${address}"][data-healthy="true"]`) !== null &&
              document.querySelectorAll(`.shard[data-runner="${address}"]`).length > 0
            ) && document.querySelectorAll(`.shard[data-runner=""]`).length === 0,
          runners,
          60_000
        )
        const total = yield* Effect.promise(() => page.locator(".shard").count())
        expect(total).toBeGreaterThan(0)
        const heldByA = yield* paintedFor(page, a.address)
        yield* Effect.promise(() => page.screenshot({ path: artifact("ops-page-1-before-drain.png"), fullPage: true }))

        // drain A from the page: watch its squares turn into B's
        const clicked = Date.now()
        yield* Effect.promise(() => page.click(`#runners tr[data-address="${a.address}"] button.drain`))
        yield* waitInPage(
          page,
          "the drained runner's first shard moving",
          ([address, before]) => document.querySelectorAll(`.shard[data-runner="${address}"]`).length < before,
          [a.address, heldByA] as [string, number],
          60_000
        )
        const firstMove = Date.now() - clicked
        yield* Effect.promise(() => page.screenshot({ path: artifact("ops-page-2-during-drain.png"), fullPage: true }))
        yield* waitInPage(
          page,
          "every shard on the other runner",
          ([address, other, all]) =>
            document.querySelector(`#runners tr[data-address="${address}"][data-draining="true"]`) !== null &&
            document.querySelectorAll(`.shard[data-runner="${other}"]`).length === all,
          [a.address, b.address, total] as [string, string, number],
          90_000
        )
        const allMoved = Date.now() - clicked
        yield* Effect.promise(() => page.screenshot({ path: artifact("ops-page-3-after-drain.png"), fullPage: true }))
        // the drained runner kept serving HTTP the whole time
        expect((yield* Effect.promise(() => fetch(`${base}/ops`))).status).toBe(200)
        yield* Effect.logWarning(
          `drain seen on the page: first shard moved ${firstMove} ms after the click, all ${total} on the other ` +
            `runner after ${allMoved} ms (the page polls every second)`
        )

        // undrain: A takes shards again
        yield* Effect.promise(() => page.click(`#runners tr[data-address="${a.address}"] button.undrain`))
        yield* waitInPage(
          page,
          "the undrained runner holding shards again",
          (address) =>
            document.querySelector(`#runners tr[data-address="${address}"][data-draining="false"]`) !== null &&
            document.querySelectorAll(`.shard[data-runner="${address}"]`).length > 0,
          a.address,
          90_000
        )
        yield* Effect.promise(() => page.screenshot({ path: artifact("ops-page-4-undrained.png"), fullPage: true }))
        // a call may have failed on a loaded machine: then it said so in a readable line
        for (const line of yield* errorLinesOf(page)) expect(line).toMatch(READABLE_ERROR_LINE)
        expect(pageErrors).toEqual([])
      }).pipe(Effect.scoped),
    scaled(240_000)
  )
})
