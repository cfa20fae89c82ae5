import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Revocations } from "../../src/http/Revocations.js"
import { TokenDenylist } from "../../src/persistence/TokenDenylist.js"
import { layerStores } from "../../src/runners/Runner.js"
import { layerEmbeddedDatabase } from "../../src/testing/TestRunner.js"
import { until } from "../support/admin.js"
import { scaled } from "../support/env.js"
import { quietLogs, withSettings } from "../support/runner.js"
import { uuid } from "../support/tasks.js"

/**
 * The safety net of the push: on the embedded database there is no LISTEN, so a revocation written by someone else
 * (another process on the same data) reaches a runner only by its periodic re-read of the denylist.
 */
const TestLayer = Revocations.Default.pipe(
  Layer.provideMerge(TokenDenylist.Default),
  Layer.provideMerge(layerStores(layerEmbeddedDatabase)),
  Layer.provide(quietLogs),
  Layer.provide(withSettings({ TOKEN_REVOCATION_REFRESH: "300 millis" }))
)

describe("the token denylist's periodic refresh", () => {
  layer(TestLayer, { timeout: scaled(120_000), excludeTestServices: true })((it) => {
    it.effect("a row written behind the runner's back is applied by the refresh, and a stream it holds is closed", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const revocations = yield* Revocations
        const tokenId = uuid()
        const holder = { userId: uuid(), credential: { tokenId, issuedAt: Math.floor(Date.now() / 1000) } }
        let closed = 0
        revocations.hold(holder, "sse", () => closed++)
        expect(revocations.isRevoked(holder)).toBe(false)

        // no NOTIFY reaches this runner (PGlite has no LISTEN): only the refresh can tell it
        yield* sql`INSERT INTO token_revocations (token_id, revoked_by, reason) VALUES (${tokenId}, 'other', 'test')`
        yield* until("the refresh applied the row", Effect.sync(() => revocations.isRevoked(holder)), (r) => r)
        expect(closed).toBe(1)
        // a holder that comes later with the same token is closed at once
        revocations.hold(holder, "ws", () => closed++)
        expect(closed).toBe(2)
      }))
  })
})
