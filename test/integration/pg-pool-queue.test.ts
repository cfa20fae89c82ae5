import { describe, expect, it } from "@effect/vitest"
import { Duration, Either } from "effect"
import pg from "pg"
import { afterEach, vi } from "vitest"
import { parseDsn } from "../../src/persistence/pgHosts.js"
import { makePool } from "../../src/persistence/pgPool.js"
import { databaseUrl, noDatabase } from "../support/database.js"

/** The pool's statement timeout; its watch gives a statement this + 1 s (on the fake clock below). */
const STATEMENT_TIMEOUT_S = 60
/** A step of the fake clock: two of them pass the watch, one does not. */
const STEP_MS = 36_000

/** Advisory lock keys of this test: the admin session holds them, the pool's statements wait for them. */
const FIRST = 470_001
const SECOND = 470_002

/** Whether backend `pid` is waiting for advisory lock `key` (pg_locks: asked, not granted). */
const waitingFor = async (admin: pg.Client, pid: number, key: number) =>
  (await admin.query(
    `SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND pid = $1 AND objid = $2`,
    [pid, key]
  )).rowCount === 1

/** Resolves once `p` holds: asked again after every answer (each ask is a round trip), no fixed wait. */
const until = async (p: () => Promise<boolean>) => {
  while (!(await p())) await new Promise((resolve) => setImmediate(resolve))
}

afterEach(() => {
  vi.useRealTimers()
})

describe.skipIf(noDatabase)("the pool's watch on one connection's queued statements", () => {
  it(
    "counts each statement from its dispatch, not from the call: a statement queued past the watch still answers",
    async () => {
      const dropped: Array<number> = []
      const pool = makePool({
        dsn: Either.getOrThrow(parseDsn(databaseUrl!)),
        maxConnections: 1,
        applicationName: "pg-pool-queue-test",
        types: pg.types,
        link: {
          connectTimeout: Duration.seconds(10),
          statementTimeout: Duration.seconds(STATEMENT_TIMEOUT_S),
          idleTimeout: Duration.seconds(10),
          keepAlive: Duration.seconds(10)
        },
        onDropped: (waited) => dropped.push(waited)
      })
      const admin = new pg.Client({ connectionString: databaseUrl })
      await admin.connect()
      try {
        await admin.query("SELECT pg_advisory_lock($1), pg_advisory_lock($2)", [FIRST, SECOND])
        const client = await pool.connect()
        try {
          const pid = (await client.query("SELECT pg_backend_pid() AS pid")).rows[0].pid as number
          // the watch's clock only: pg's sockets and the answers stay real
          vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] })
          // given together: the first waits for FIRST, the second (behind it) for SECOND, the third behind both
          const answers = Promise.allSettled([
            client.query("SELECT pg_advisory_lock($1)", [FIRST]),
            client.query("SELECT pg_advisory_lock($1)", [SECOND]),
            client.query("SELECT 3 AS n")
          ])
          await until(() => waitingFor(admin, pid, FIRST))
          vi.advanceTimersByTime(STEP_MS)
          await admin.query("SELECT pg_advisory_unlock($1)", [FIRST])
          await until(() => waitingFor(admin, pid, SECOND))
          // the second statement has waited two steps since its call (past the watch), one since it was sent
          vi.advanceTimersByTime(STEP_MS)
          await admin.query("SELECT pg_advisory_unlock($1)", [SECOND])
          expect((await answers).map((a) => a.status)).toEqual(["fulfilled", "fulfilled", "fulfilled"])
          expect(dropped).toEqual([])
          // the same connection still answers
          expect((await client.query("SELECT pg_backend_pid() AS pid")).rows[0].pid).toBe(pid)
          await client.query("SELECT pg_advisory_unlock_all()")
        } finally {
          client.release()
        }
      } finally {
        vi.useRealTimers()
        await admin.end()
        await pool.end()
      }
    },
    60_000
  )
})
