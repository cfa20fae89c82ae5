import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { devSecret } from "../../../src/providers/devSecrets.js"
import { scaled } from "../../support/env.js"
import { type Proc, spawnRunner, waitForHttp, withTimeout } from "../../support/processes.js"
import { freePort } from "../../support/runner.js"
import { openaiEvent, openAISigner } from "../../support/webhooks.js"

/** Whichever comes first: the runner exits (its code), or it answers HTTP on `port` (undefined). */
const exitOrServe = (proc: Proc, port: number) =>
  withTimeout(
    Promise.race([
      proc.exited,
      // an early exit makes waitForHttp fail: then `exited` has the answer
      waitForHttp(port, proc).then(() => undefined, () => new Promise<never>(() => undefined))
    ]),
    120_000,
    "the runner to exit or serve"
  )

const withDataDir = async <A>(f: (dir: string) => Promise<A>) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pglite-auth-"))
  try {
    return await f(dir)
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

describe("without AUTH_SECRET the runner stays on loopback", () => {
  it("bound to 0.0.0.0 without AUTH_SECRET: exit 1, one line naming AUTH_SECRET, nothing started", async () => {
    const [httpPort, runnerPort] = await Effect.runPromise(Effect.all([freePort, freePort]))
    await withDataDir(async (dir) => {
      const runner = spawnRunner({
        HTTP_HOST: "0.0.0.0",
        HTTP_PORT: String(httpPort),
        RUNNER_PORT: String(runnerPort),
        EMBEDDED_DATA_DIR: dir
      })
      try {
        // was: it started, listening on every interface with the development secret and development sessions
        expect(await exitOrServe(runner, httpPort)).toBe(1)
        expect(runner.output().trimEnd().split("\n")).toEqual([
          "config: AUTH_SECRET: must be set when HTTP_HOST (0.0.0.0) is not a loopback address"
        ])
        // refused before the embedded database was opened
        expect(fs.existsSync(path.join(dir, "runner.lock"))).toBe(false)
      } finally {
        runner.child.kill("SIGKILL")
      }
    })
  }, scaled(180_000))

  it(
    "npm start's default (loopback, embedded simulator): serves, says so, and keeps public secrets off real endpoints",
    async () => {
      const [httpPort, runnerPort, simPort] = await Effect.runPromise(Effect.all([freePort, freePort, freePort]))
      await withDataDir(async (dir) => {
        const runner = spawnRunner({
          // what `npm start` does with no provider key set; spawnRunner turns it off by default
          EMBEDDED_SIMULATOR: "true",
          SIMULATOR_PORT: String(simPort),
          HTTP_PORT: String(httpPort),
          RUNNER_PORT: String(runnerPort),
          EMBEDDED_DATA_DIR: dir,
          // OpenAI pointed at its real API: its webhook secret still defaults to the simulator's public one
          OPENAI_BASE_URL: "https://api.openai.com"
        })
        const base = `http://127.0.0.1:${httpPort}`
        try {
          expect(await exitOrServe(runner, httpPort)).toBeUndefined()
          const said = runner.output().split("\n").filter((l) => l.includes("AUTH_SECRET is unset"))
          expect(said).toHaveLength(1)
          expect(said[0]).toContain("listening on loopback only")

          // development mode works as before: the page's development session, not Secure on plain-HTTP loopback
          const dev = await fetch(`${base}/v1/dev/session`, { method: "POST" })
          expect(dev.status).toBe(200)
          expect(dev.headers.get("set-cookie")).not.toMatch(/Secure/i)

          const post = (provider: string, body: string, secret: string) =>
            fetch(`${base}/webhooks/${provider}`, {
              method: "POST",
              headers: { ...openAISigner(secret)(body), "content-type": "application/json" },
              body
            }).then((r) => r.status)
          // was 204: anyone who has read this repository could sign OpenAI webhooks
          const openai = openaiEvent(`video_${crypto.randomUUID()}`)
          expect(await post("openai", openai, devSecret("openai"))).toBe(404)
          expect(runner.output()).toContain("OpenAI Videos webhooks: the simulator's development secret is refused")
          // Replicate still talks to the embedded simulator, which signs with its development secret
          const prediction = JSON.stringify({ id: `p-${crypto.randomUUID()}`, status: "starting" })
          expect(await post("replicate", prediction, devSecret("replicate"))).toBe(204)

          runner.child.kill("SIGTERM")
          expect(await withTimeout(runner.exited, 30_000, "graceful shutdown")).toBe(0)
        } finally {
          runner.child.kill("SIGKILL")
        }
      })
    },
    scaled(240_000)
  )
})
