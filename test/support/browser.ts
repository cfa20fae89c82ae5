import { Effect, type Scope } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { type Browser, chromium, type Page } from "playwright-core"
import { isCI, services } from "./env.js"

/**
 * Debian's Chromium, driven by playwright-core. Locally a missing browser skips the browser tests; in CI it fails
 * the run (the page tests must not be skipped there).
 */
export const CHROMIUM = services.chromiumPath
export const noBrowser = !fs.existsSync(CHROMIUM)
if (noBrowser && isCI) {
  throw new Error(`CI=true but there is no browser at ${CHROMIUM}: the browser tests must not be skipped in CI`)
}

/** Where browser tests leave their screenshots (test-artifacts/README.md). */
export const ARTIFACTS = path.resolve("test-artifacts")

/** A headless Chromium for the current scope (no sandbox: the tests may run as root in a container). */
export const launchBrowser: Effect.Effect<Browser, never, Scope.Scope> = Effect.acquireRelease(
  Effect.promise(() => chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox"] })),
  (b) => Effect.promise(() => b.close())
)

/** The path of screenshot `name` under test-artifacts/ (the directory made when missing). */
export const artifact = (name: string) => {
  fs.mkdirSync(ARTIFACTS, { recursive: true })
  return path.join(ARTIFACTS, name)
}

/**
 * The operator page's error lines (#messages): on a loaded machine a call may fail (503 while the database is slow),
 * and that is allowed; each failure must still be one line naming the call, its status and the server's words.
 */
export const errorLinesOf = (page: Page) =>
  Effect.promise(() => page.locator("#messages li.error .text").allTextContents())

export const READABLE_ERROR_LINE =
  /^(GET|POST|PUT) \/admin\/\S+ (→ \d{3} [A-Z][A-Za-z ]+: \S.*|: no answer within .*|: the runner did not answer .*)$/
