import { describe, expect, it } from "@effect/vitest"
import { scaled } from "../../support/env.js"
import { allocatePort } from "../../support/ports.js"
import { spawnRunner, withTimeout } from "../../support/processes.js"

describe("LOG_FORMAT=json in a runner process", () => {
  it("every line is one JSON object, the program's last error too, its stack trace inside one field", async () => {
    // nothing listens on this port: the runner logs, fails to reach its database and exits with the error
    const runner = spawnRunner({
      LOG_FORMAT: "json",
      DATABASE_URL: `postgres://postgres@127.0.0.1:${await allocatePort()}/postgres`,
      HTTP_PORT: String(await allocatePort()),
      RUNNER_PORT: String(await allocatePort())
    })
    try {
      const code = await withTimeout(runner.exited, scaled(90_000), "runner exit without its database")
      expect(code).toBe(1)
      const lines = runner.output().trimEnd().split("\n")
      expect(lines.length).toBeGreaterThanOrEqual(2)
      const records = lines.map((line) => JSON.parse(line) as Record<string, unknown>)
      for (const r of records) {
        expect(typeof r.timestamp).toBe("string")
        expect(typeof r.level).toBe("string")
        expect(typeof r.message).toBe("string")
      }
      // the development-mode warning, its annotation a top-level field
      expect(records[0]).toMatchObject({ level: "WARN", http_host: "127.0.0.1" })
      const failure = records.find((r) => r.level === "ERROR")!
      expect(failure.message).toContain("SqlError")
      expect(String(failure.cause)).toMatch(/SqlError[^]*\n\s+at /)
    } finally {
      runner.child.kill("SIGKILL")
    }
  })
})
