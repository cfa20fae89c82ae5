import { describe, expect, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { admin, operatorToken, runnerPath, runOps, scopedRunner, shardCounts, until } from "../../support/admin.js"
import { makeTestDatabaseUrl, noDatabase } from "../../support/database.js"
import { scaled } from "../../support/env.js"
import { waitForHttp } from "../../support/processes.js"
import { freePort } from "../../support/runner.js"

const AUTH_SECRET = "cluster-weights-test-secret-0123456789abcdef"
const [httpA, runnerA, httpB, runnerB] = await Effect.runPromise(Effect.all([freePort, freePort, freePort, freePort]))
const A = `127.0.0.1:${runnerA}`
const B = `127.0.0.1:${runnerB}`

class DbUrl extends Context.Tag("DbUrl")<DbUrl, string>() {}
const DbUrlLive = Layer.scoped(DbUrl, Effect.map(makeTestDatabaseUrl, ({ url }) => url))

const runner = (databaseUrl: string, httpPort: number, runnerPort: number, weight: number) =>
  scopedRunner({
    DATABASE_URL: databaseUrl,
    AUTH_SECRET,
    HTTP_PORT: String(httpPort),
    RUNNER_PORT: String(runnerPort),
    RUNNER_WEIGHT: String(weight),
    ROCKETMQ_ENDPOINTS: "",
    LOG_LEVEL: "WARN"
  })

/** Whether runner A's share of the 300 shards is within ±10% of `share` (and B holds the rest). */
const shares = (token: string, share: number) =>
  until(`A holds ${share * 100}% of the shards`, shardCounts(httpA, token), (counts) => {
    const a = counts.get(A) ?? 0
    const b = counts.get(B) ?? 0
    return a + b === 300 && Math.abs(a / 300 - share) <= share * 0.1
  }, "30 seconds")

describe.skipIf(noDatabase)("runner weights", () => {
  layer(DbUrlLive, { timeout: scaled(120_000), excludeTestServices: true })((it) => {
    it.effect("weights 1 and 3 give shard shares within ±10% of 25/75, from RUNNER_WEIGHT or set at runtime", () =>
      Effect.gen(function*() {
        const url = yield* DbUrl
        const token = yield* operatorToken(AUTH_SECRET)
        const a = yield* runner(url, httpA, runnerA, 1)
        const b = yield* runner(url, httpB, runnerB, 3)
        yield* Effect.promise(() => Promise.all([waitForHttp(httpA, a), waitForHttp(httpB, b)]))
        const started = yield* shares(token, 0.25)
        yield* Effect.logWarning(`RUNNER_WEIGHT 1/3: ${started.get(A)}/${started.get(B)} shards`)

        const ops = { OPS_URL: `http://127.0.0.1:${httpA}`, OPS_TOKEN: token }
        const status = yield* runOps(["cluster", "status"], ops)
        expect(status.code).toBe(0)
        expect(status.stdout).toMatch(new RegExp(`${B}\\s+yes\\s+no\\s+3\\s+\\d+`))

        // at runtime, without a restart: A to 3 (the CLI), then B to 9 (the API): 25/75 again
        const set = yield* runOps(["runner", "weight", A, "3"], ops)
        expect(set.code).toBe(0)
        expect(set.stdout).toContain(`${A} weight 3`)
        const even = yield* shares(token, 0.5)
        yield* Effect.logWarning(`weights 3/3 at runtime: ${even.get(A)}/${even.get(B)} shards`)
        const put = yield* admin(httpB, token, `${runnerPath(B)}/weight`, {
          method: "PUT",
          body: JSON.stringify({ weight: 9 })
        })
        expect(put.status).toBe(204)
        const back = yield* shares(token, 0.25)
        yield* Effect.logWarning(`weights 3/9 at runtime: ${back.get(A)}/${back.get(B)} shards`)
        const view = yield* admin(httpA, token, "/admin/cluster")
        const weights = (view.body as { runners: Array<{ address: string; weight: number }> }).runners
        expect(Object.fromEntries(weights.map((r) => [r.address, r.weight]))).toEqual({ [A]: 3, [B]: 9 })

        // refused: an unknown runner, a weight out of range, taking the last owner's shards away
        const unknown = yield* runOps(["runner", "weight", "10.9.9.9:1", "2"], ops)
        expect(unknown.code).toBe(1)
        expect(unknown.stderr).toContain("no live runner at 10.9.9.9:1")
        const negative = yield* admin(httpA, token, `${runnerPath(A)}/weight`, {
          method: "PUT",
          body: JSON.stringify({ weight: -1 })
        })
        expect(negative.status).toBe(400)
        expect(
          (yield* admin(httpA, token, `${runnerPath(A)}/weight`, {
            method: "PUT",
            body: JSON.stringify({ weight: 0 })
          })).status
        ).toBe(204)
        yield* until("B holds every shard", shardCounts(httpA, token), (counts) => counts.get(B) === 300)
        const last = yield* admin(httpA, token, `${runnerPath(B)}/drain`, { method: "POST" })
        expect(last.status).toBe(409)
      }).pipe(Effect.scoped))
  })
})
