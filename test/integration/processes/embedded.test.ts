import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { TokenSigner } from "../../../src/http/Auth.js"
import type { TenantId, UserId } from "../../../src/schema/ids.js"
import { scaled } from "../../support/env.js"
import { type Proc, spawnRunner, waitForHttp, withTimeout } from "../../support/processes.js"
import { freePort, withSettings } from "../../support/runner.js"

const SECRET = "embedded-test-secret-0123456789abcdef"

/** `npm start`'s program on the embedded PGlite: no DATABASE_URL, data in `dataDir`. */
const startRunner = (dataDir: string, httpPort: number, runnerPort: number): Proc => {
  // a bare machine: no PostgreSQL, Redis or RocketMQ configured (the in-process stand-ins are used); spawnRunner
  // passes none of the run's service URLs on
  return spawnRunner({
    EMBEDDED_DATA_DIR: dataDir,
    HTTP_PORT: String(httpPort),
    RUNNER_PORT: String(runnerPort),
    AUTH_SECRET: SECRET,
    // nothing listens there: the submission's outcome stays unknown (no lookup), so the task waits
    RUNWAY_BASE_URL: "http://127.0.0.1:9"
  })
}

describe("npm start on the embedded PostgreSQL (PGlite)", () => {
  it("serves the API, refuses a second runner on the same data, stops cleanly on SIGTERM, keeps its data", async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "pglite-"))
    const [httpPort, runnerPort, otherHttp, otherRunner] = await Effect.runPromise(
      Effect.all([freePort, freePort, freePort, freePort])
    )
    const tenant = crypto.randomUUID() as TenantId
    const token = await Effect.runPromise(
      Effect.flatMap(
        TokenSigner,
        (s) => s.sign({ tenant_id: tenant, sub: crypto.randomUUID() as UserId, projects: "*" })
      )
        .pipe(Effect.provide(TokenSigner.Default.pipe(Layer.provide(withSettings({ AUTH_SECRET: SECRET })))))
    )
    const headers = { authorization: `Bearer ${token}`, "content-type": "application/json" }
    const first = startRunner(dataDir, httpPort, runnerPort)
    try {
      await waitForHttp(httpPort, first)

      const second = startRunner(dataDir, otherHttp, otherRunner)
      expect(await withTimeout(second.exited, 60_000, "second runner refusal")).not.toBe(0)
      expect(second.output()).toContain("is in use by runner pid")

      const made = await fetch(`http://127.0.0.1:${httpPort}/v1/projects`, { method: "POST", headers })
      expect(made.status).toBe(201)
      const project = ((await made.json()) as { project_id: string }).project_id
      const created = await fetch(`http://127.0.0.1:${httpPort}/v1/projects/${project}/tasks`, {
        method: "POST",
        headers: { ...headers, "idempotency-key": "k1" },
        body: JSON.stringify({ provider: "runway", model: "gen4.5", prompt: "a boat", duration_seconds: 4 })
      })
      expect(created.status).toBe(201)
      const task = (await created.json()) as { task_id: string }

      first.child.kill("SIGTERM")
      expect(await withTimeout(first.exited, 20_000, "graceful shutdown")).toBe(0)
      expect(fs.existsSync(path.join(dataDir, "runner.lock"))).toBe(false)

      const again = startRunner(dataDir, httpPort, runnerPort)
      try {
        await waitForHttp(httpPort, again)
        const got = await fetch(`http://127.0.0.1:${httpPort}/v1/projects/${project}/tasks/${task.task_id}`, {
          headers
        })
        expect(got.status).toBe(200)
        const body = (await got.json()) as { task_id: string; status: string }
        expect(body.task_id).toBe(task.task_id)
        // kept across the restart, and never failed for want of an answer from the provider
        expect(["queued", "submitting", "submit_unknown"]).toContain(body.status)
      } finally {
        again.child.kill("SIGTERM")
        await withTimeout(again.exited, 20_000, "second shutdown")
      }
    } finally {
      first.child.kill("SIGKILL")
      fs.rmSync(dataDir, { recursive: true, force: true })
    }
  }, scaled(180_000))
})
