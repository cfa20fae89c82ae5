import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { freePort } from "../../../src/testing/TestRunner.js"
import { scaled } from "../../support/env.js"
import { probe, waitForReady } from "../../support/npmStart.js"
import { spawnRunner, withTimeout } from "../../support/processes.js"

/**
 * Every clock of an idle runner, five times faster than its defaults: the wake loops' sweeps, the sweeper, the
 * reconcilers, the cluster's lock refresh, assignment reads, health checks and storage polls. IDLE of this is as
 * many rounds of each loop as five idle minutes at the defaults (checked once by hand at the defaults: the README says).
 */
const FAST_CLOCKS = {
  INBOX_SWEEP_INTERVAL: "200 millis",
  OUTBOX_SWEEP_INTERVAL: "200 millis",
  SWEEP_INTERVAL: "1 second",
  RECONCILE_INTERVAL: "6 seconds",
  SHARD_LOCK_REFRESH_INTERVAL: "400 millis",
  REFRESH_ASSIGNMENTS_INTERVAL: "200 millis",
  RUNNER_HEALTH_CHECK_INTERVAL: "400 millis",
  ENTITY_MESSAGE_POLL_INTERVAL: "200 millis",
  EVENT_LOOP_LAG_WINDOW: "1 second"
}
const IDLE_MS = 60_000

/** A log line without its time and fiber id: two lines with the same text are the same message said again. */
const messageOf = (line: string) => line.replace(/^\[[\d:.]+\]\s*/, "").replace(/\(#\d+\)/, "")

describe("the embedded runner (PGlite) while idle", () => {
  it("says once that the sweeps carry the inbox and outbox, and repeats no line while idle", async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "pglite-quiet-"))
    const [httpPort, runnerPort, simPort] = await Effect.runPromise(Effect.all([freePort, freePort, freePort]))
    // `npm start`'s defaults: no DATABASE_URL, REDIS_URL or ROCKETMQ_ENDPOINTS, the provider simulator in process
    const runner = spawnRunner({
      ...FAST_CLOCKS,
      EMBEDDED_SIMULATOR: "true",
      SIMULATOR_PORT: String(simPort),
      EMBEDDED_DATA_DIR: dataDir,
      HTTP_PORT: String(httpPort),
      RUNNER_PORT: String(runnerPort)
    })
    try {
      await waitForReady(httpPort, runner)
      const readyAt = runner.output().length
      // idle: nothing but a prober, which must find it ready throughout (the loops run, and fail nowhere)
      const deadline = Date.now() + IDLE_MS
      while (Date.now() < deadline) {
        expect(await probe(httpPort, "/readyz", scaled(3_000))).toBe(200)
        await new Promise((r) => setTimeout(r, 2_000))
      }

      const lines = runner.output().split("\n")
      const top = lines.filter((l) => /^\[[\d:.]+\]/.test(l))
      // was: "inbox processor LISTEN lost" / "outbox relay LISTEN lost" with a stack trace, and "LISTEN not proven"
      expect(top.filter((l) => /LISTEN (lost|not proven)/.test(l))).toEqual([])
      expect(top.filter((l) => l.includes("no LISTEN/NOTIFY on it"))).toHaveLength(1)
      const idle = runner.output().slice(readyAt).split("\n").filter((l) => /^\[[\d:.]+\]/.test(l))
      expect(idle.filter((l) => /\] (WARN|ERROR|FATAL) /.test(l))).toEqual([])
      const counts = new Map<string, number>()
      for (const line of top) counts.set(messageOf(line), (counts.get(messageOf(line)) ?? 0) + 1)
      expect([...counts].filter(([, n]) => n > 1)).toEqual([])

      runner.child.kill("SIGTERM")
      expect(await withTimeout(runner.exited, 30_000, "graceful shutdown")).toBe(0)
    } finally {
      runner.child.kill("SIGKILL")
      fs.rmSync(dataDir, { recursive: true, force: true })
    }
  }, scaled(300_000) + IDLE_MS)
})
