import { Snowflake } from "@effect/cluster"
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { layerTestDatabase, noDatabase } from "../support/database.js"
import { scaled } from "../support/env.js"

/**
 * int8 through the runner's database layer (Database.ts): our counters and versions as numbers, and
 * @effect/cluster's snowflake ids exact. They were read as numbers too, rounded to a multiple of 32 above 2^57: the
 * keep-alives of different tasks came back with one request id, and their replies went to the wrong message.
 */
describe.skipIf(noDatabase)("int8 through the database layer", () => {
  layer(layerTestDatabase(2), { timeout: scaled(60_000), excludeTestServices: true })((it) => {
    it.effect("snowflake ids (as @effect/cluster writes them) come back exact; small int8 values are numbers", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const generator = yield* Snowflake.makeGenerator
        // one millisecond's ids: the sequence in the low bits, where the rounding struck
        const ids = Array.from({ length: 64 }, () => generator.unsafeNext())
        yield* sql`CREATE TEMP TABLE snowflakes (id BIGINT PRIMARY KEY)`
        yield* sql`INSERT INTO snowflakes ${sql.insert(ids.map((id) => ({ id: String(id) })))}`
        const rows = yield* sql<{ id: unknown }>`SELECT id FROM snowflakes ORDER BY id`
        expect(rows.map((r) => BigInt(r.id as string))).toEqual([...ids].sort((a, b) => (a < b ? -1 : 1)))
        expect(new Set(rows.map((r) => String(r.id))).size).toBe(ids.length)

        const small = yield* sql<{ n: unknown; v: unknown }>`SELECT count(*) AS n, 9007199254740991::int8 AS v`
        expect(small[0]).toEqual({ n: 1, v: Number.MAX_SAFE_INTEGER })
      }).pipe(Effect.scoped))
  })
})
