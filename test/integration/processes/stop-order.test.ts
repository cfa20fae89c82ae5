import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { noDatabase } from "../../support/database.js"
import { scaled, services } from "../../support/env.js"
import { rocketmqScript, runnerOnFreshDatabase, withTimeout } from "../../support/processes.js"
import { uuid } from "../../support/tasks.js"

/**
 * A runner stopping on SIGTERM with RocketMQ configured hands its shards over before its dispatcher stops. The
 * dispatcher's consumer waits, on its stop, for its receives (long polls of up to 5 s that cannot be cancelled) to end
 * and hand their messages back. Closed before the cluster, that wait held every shard on the stopping runner, whose
 * entities went on serving ~3 s after the signal (bench:handoff, stop 39); now the dispatcher is built before the
 * cluster (src/runners/Runner.ts layerPropagationFor), so it closes after. The order is the layers' own, not a timing:
 * the runner's log says it either way.
 */
const endpoints = services.rocketmqEndpoints
const skip = noDatabase || endpoints === undefined

const suffix = uuid().slice(0, 8)
const topic = `test-stop-${suffix}`
const group = `test-stop-dispatcher-${suffix}`

beforeAll(() => {
  if (!skip) rocketmqScript("topic", topic, group)
}, scaled(300_000))
afterAll(() => {
  if (!skip) rocketmqScript("drop", topic, group)
}, scaled(120_000))

const HANDED_OVER = "cluster runner stopped: its shards are handed over"
const DISPATCHER_STOPPED = `notification dispatcher stopped (${group})`

describe.skipIf(skip)("a runner stopping with RocketMQ", () => {
  it.live("hands its shards over before its dispatcher's consumer has stopped", () =>
    Effect.gen(function*() {
      const { runner } = yield* runnerOnFreshDatabase({
        ROCKETMQ_ENDPOINTS: endpoints!,
        ROCKETMQ_TOPIC: topic,
        DISPATCHER_GROUP: group,
        AUTH_SECRET: "stop-order-test-secret-0123456789abcdef",
        LOG_LEVEL: "INFO"
      })

      runner.child.kill("SIGTERM")
      const code = yield* Effect.promise(() => withTimeout(runner.exited, 60_000, "runner to exit after SIGTERM"))
      const output = runner.output()
      expect(code, output).toBe(0)
      const handedOver = output.indexOf(HANDED_OVER)
      const dispatcherStopped = output.indexOf(DISPATCHER_STOPPED)
      expect(handedOver, output).toBeGreaterThan(-1)
      expect(dispatcherStopped, output).toBeGreaterThan(-1)
      // was: the dispatcher stopped first, after its last long poll ended, and only then the cluster
      expect(handedOver, output).toBeLessThan(dispatcherStopped)
    }).pipe(Effect.scoped), scaled(180_000))
})
