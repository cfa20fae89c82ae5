import { describe, expect, layer } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { operatorToken, scopedRunner, shardCounts, until } from "../../support/admin.js"
import { noDatabase } from "../../support/database.js"
import { scaled, scaledDuration } from "../../support/env.js"
import { metricOn } from "../../support/metrics.js"
import { waitForHttp, withTimeout } from "../../support/processes.js"
import { DbUrl, layerRunwayFixture, runwayRunnerEnv, tempFolder, twoRunnerPorts } from "../../support/runwayRunners.js"

/**
 * A runner joining or leaving is heard by the others at once (src/cluster/RunnerChanges.ts), not at their next read of
 * the runner list. The runners here read the list every 10 minutes (REFRESH_ASSIGNMENTS_INTERVAL): the shards can only
 * move within the test's bounds because the join and the leave were announced.
 */
const AUTH_SECRET = "runner-leaves-test-secret-0123456789abcdef"
const { simPort, httpA, runnerA, httpB, runnerB, A, B, keyPrefix } = await twoRunnerPorts()
const objects = tempFolder("runner-leaves-objects")

const runner = (databaseUrl: string, httpPort: number, runnerPort: number) =>
  scopedRunner({
    ...runwayRunnerEnv({
      databaseUrl,
      httpPort,
      runnerPort,
      sim: `http://127.0.0.1:${simPort}`,
      objects,
      keyPrefix
    }),
    AUTH_SECRET,
    REFRESH_ASSIGNMENTS_INTERVAL: "10 minutes"
  })

const wakes = (port: number) => metricOn(port, "cluster_runner_list_wakes_total")

describe.skipIf(noDatabase)("a runner joining or leaving", () => {
  layer(layerRunwayFixture(simPort), { timeout: scaled(120_000), excludeTestServices: true })((it) => {
    it.effect(
      "is heard at once: with a 10-minute list refresh, the shards are shared on a join and all taken on a SIGTERM",
      () =>
        Effect.gen(function*() {
          const url = yield* DbUrl
          const token = yield* operatorToken(AUTH_SECRET)
          const a = yield* runner(url, httpA, runnerA)
          yield* Effect.promise(() => waitForHttp(httpA, a))
          yield* until("A holds every shard", shardCounts(httpA, token), (c) => c.get(A) === 300, "60 seconds")
          const wakesBefore = yield* wakes(httpA)

          // B joins: A hears it, reads the list and gives B its share
          const b = yield* runner(url, httpB, runnerB)
          yield* Effect.promise(() => waitForHttp(httpB, b))
          yield* until(
            "both runners hold shards",
            shardCounts(httpA, token),
            (c) => (c.get(A) ?? 0) > 0 && (c.get(B) ?? 0) > 0,
            "60 seconds"
          )

          // B stops gracefully: A takes every shard back without waiting for its next read of the list
          const stoppedAt = Date.now()
          b.child.kill("SIGTERM")
          const code = yield* Effect.promise(() => withTimeout(b.exited, scaled(30_000), "runner B stop"))
          expect(code).toBe(0)
          yield* until("A holds every shard again", shardCounts(httpA, token), (c) => c.get(A) === 300, "60 seconds")
          yield* Effect.logWarning(`A holds every shard ${Date.now() - stoppedAt} ms after B's SIGTERM`)
          expect(yield* wakes(httpA)).toBeGreaterThanOrEqual(wakesBefore + 2)
        }).pipe(Effect.scoped),
      { timeout: scaledDuration(Duration.minutes(4)).pipe(Duration.toMillis) }
    )
  })
})
