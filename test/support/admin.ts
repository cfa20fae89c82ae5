import { FetchHttpClient, HttpApiClient, HttpClient, HttpClientRequest } from "@effect/platform"
import { ControlPlaneApi } from "../../src/http/Api.js"

/** The admin API's typed client at `baseUrl`, with an operator token for `operator` (what the ops CLI uses). */
export const adminClient = (baseUrl: string, operator = "ops-test") =>
  Effect.gen(function*() {
    const token = yield* Effect.flatMap(TokenSigner, (s) => s.signOperator(operator))
    return yield* HttpApiClient.make(ControlPlaneApi, {
      baseUrl,
      transformClient: HttpClient.mapRequest(HttpClientRequest.bearerToken(token))
    })
  }).pipe(Effect.provide(FetchHttpClient.layer))
import { Duration, Effect, Schedule } from "effect"
import { spawn } from "node:child_process"
import { inject } from "vitest"
import { TokenSigner } from "../../src/http/Auth.js"
import { withSettings } from "../../src/testing/TestRunner.js"
import { processEnv, scaled, scaledDuration, TEST_PROCESS_MARK } from "./env.js"
import { type Proc, spawnRunner, withTimeout } from "./processes.js"

/** An operator token signed with `authSecret` (the runners under test must have the same AUTH_SECRET). */
export const operatorToken = (authSecret: string, operator = "test-operator") =>
  Effect.flatMap(TokenSigner, (s) => s.signOperator(operator)).pipe(
    Effect.provide(TokenSigner.Default),
    Effect.provide(withSettings({ AUTH_SECRET: authSecret })),
    Effect.orDie
  )

/** A request to a runner's admin API: its status and JSON body (null when empty). */
export const admin = (port: number, token: string, path: string, init: RequestInit = {}) =>
  Effect.tryPromise({
    catch: (cause) => `${init.method ?? "GET"} ${path} on ${port}: ${String(cause)}`,
    try: async () => {
      const res = await fetch(`http://127.0.0.1:${port}${path}`, {
        ...init,
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json", ...init.headers },
        signal: AbortSignal.timeout(scaled(10_000))
      })
      const text = await res.text()
      return { status: res.status, body: text === "" ? null : JSON.parse(text) as unknown }
    }
  })

export const runnerPath = (address: string) => `/admin/runners/${encodeURIComponent(address)}`

/** Shards per runner address (null: held by nobody) from GET /admin/shards. */
export const shardCounts = (port: number, token: string) =>
  Effect.flatMap(admin(port, token, "/admin/shards"), ({ body, status }) => {
    if (status !== 200) return Effect.fail(`GET /admin/shards: ${status} ${JSON.stringify(body)}`)
    const counts = new Map<string | null, number>()
    for (const s of (body as { shards: Array<{ runner: string | null }> }).shards) {
      counts.set(s.runner, (counts.get(s.runner) ?? 0) + 1)
    }
    return Effect.succeed(counts)
  })

/** `npm run ops -- …args` as an operator would run it: its exit code and what it printed. */
export const runOps = (args: ReadonlyArray<string>, settings: Record<string, string>) =>
  Effect.promise(() =>
    new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const child = spawn("npm", ["run", "-s", "ops", "--", ...args], {
        env: { ...processEnv(settings), [TEST_PROCESS_MARK]: inject("testRunId") },
        stdio: "pipe"
      })
      let stdout = ""
      let stderr = ""
      child.stdout.on("data", (d) => (stdout += d))
      child.stderr.on("data", (d) => (stderr += d))
      child.on("exit", (code) => resolve({ code, stdout, stderr }))
    })
  )

/** A runner process with `settings`, stopped (SIGTERM, then waited for) when the scope closes. */
export const scopedRunner = (settings: Record<string, string>) =>
  Effect.acquireRelease(
    Effect.sync(() => spawnRunner(settings)),
    (p: Proc) =>
      Effect.promise(() => {
        p.child.kill("SIGTERM")
        return withTimeout(p.exited, 20_000, "runner stop").catch(() => p.child.kill("SIGKILL"))
      })
  )

/** Waits (up to `within`, scaled) until `effect` answers something `predicate` accepts; else dies naming `what` and the last answer. */
export const until = <A, E, R>(
  what: string,
  effect: Effect.Effect<A, E, R>,
  predicate: (a: A) => boolean,
  within: Duration.DurationInput = Duration.seconds(30)
) => {
  let last: unknown = "nothing yet"
  return effect.pipe(
    Effect.tap((a) => Effect.sync(() => (last = a instanceof Map ? Object.fromEntries(a) : a))),
    Effect.tapError((e) => Effect.sync(() => (last = e))),
    Effect.filterOrFail(predicate, () => "not yet"),
    Effect.retry(Schedule.spaced(Duration.millis(100)).pipe(Schedule.upTo(scaledDuration(within)))),
    Effect.catchAll(() =>
      Effect.dieMessage(`${what}: not within ${Duration.format(within)}; last: ${JSON.stringify(last)}`)
    )
  )
}
