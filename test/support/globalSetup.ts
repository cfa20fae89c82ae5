import { randomUUID } from "node:crypto"
import { readdirSync, readFileSync } from "node:fs"
import type { TestProject } from "vitest/node"
import { buildDist } from "../../scripts/build.mjs"
import { TEST_PROCESS_MARK } from "./env.js"

/** Processes started by tests (marked in their environment) that are still running. */
const markedProcesses = (runId: string): Array<number> => {
  const found: Array<number> = []
  for (const entry of readdirSync("/proc")) {
    const pid = Number(entry)
    if (!Number.isInteger(pid) || pid === process.pid) continue
    try {
      if (readFileSync(`/proc/${pid}/environ`, "latin1").split("\0").includes(`${TEST_PROCESS_MARK}=${runId}`)) {
        found.push(pid)
      }
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return found
}

/** After the whole run, even one where a test timed out or a worker died: no runner a test started stays behind. */
export default async (project: TestProject) => {
  // the runner the process tests start is the one `npm start` runs: built from this checkout's sources, now
  await buildDist()
  // this run's mark, handed to the test workers (other runs on the machine keep theirs)
  const runId = randomUUID()
  project.provide("testRunId", runId)
  return () => teardown(runId)
}

const teardown = (runId: string) => {
  const left = markedProcesses(runId)
  for (const pid of left) {
    try {
      process.kill(pid, "SIGKILL")
    } catch {
      // already gone
    }
  }
  if (left.length > 0) console.warn(`test teardown: killed ${left.length} process(es) left by tests: ${left.join(" ")}`)
}
