import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { scaled } from "../../support/env.js"
import { killAll, probe, type ProbeAnswer, spawnNpmStart, waitForReady } from "../../support/npmStart.js"
import { withTimeout } from "../../support/processes.js"
// kernel-chosen ports: other suites on this machine take theirs from the same fixed blocks (ports.ts)
import { freePort } from "../../../src/testing/TestRunner.js"

/**
 * `npm start` as a user or a supervisor runs it, on the embedded defaults (PGlite in a temporary folder, the provider
 * simulator in process), signalled the way a supervisor signals: SIGTERM to the process it started, npm.
 */
describe("SIGTERM to `npm start`", () => {
  it("turns readiness off before the listener closes, then stops every process npm started", async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "pglite-signals-"))
    const [httpPort, runnerPort, simPort] = await Effect.runPromise(Effect.all([freePort, freePort, freePort]))
    const start = spawnNpmStart({
      EMBEDDED_DATA_DIR: dataDir,
      HTTP_PORT: String(httpPort),
      RUNNER_PORT: String(runnerPort),
      SIMULATOR_PORT: String(simPort)
    })
    try {
      await waitForReady(httpPort, start)
      const running = start.processes()
      // npm and the runner at least (the runner's esbuild service too): a test with one process would prove nothing
      expect(running.map((p) => p.command)).toEqual(
        expect.arrayContaining([expect.stringMatching(/^npm/), expect.stringContaining("dist/src/runners/main.js")])
      )

      // /readyz polled back to back from before the signal until the listener is gone
      const answers: Array<ProbeAnswer> = []
      let polling = true
      const poller = (async () => {
        while (polling) {
          const answer = await probe(httpPort, "/readyz", scaled(3_000))
          answers.push(answer)
          if (answer === "refused") return
        }
      })()
      process.kill(start.child.pid!, "SIGTERM")
      const code = await withTimeout(start.exited, 60_000, "npm start to exit after SIGTERM")
      polling = false
      await poller

      // was: npm's shell died and the runner (then under tsx) was left running, orphaned
      expect(start.processes()).toEqual([])
      expect(code).toBe(0)
      // 200 until the signal, then 503 while the listener still accepts, then nothing: never 200 after a 503
      const firstNot200 = answers.findIndex((a) => a !== 200)
      expect(answers[firstNot200]).toBe(503)
      expect(answers.slice(firstNot200).every((a) => a !== 200)).toBe(true)
      expect(start.output()).toContain("runner stopping: readiness off")
      expect(fs.existsSync(path.join(dataDir, "runner.lock"))).toBe(false)
    } finally {
      killAll(start)
      fs.rmSync(dataDir, { recursive: true, force: true })
    }
  }, scaled(300_000))
})
