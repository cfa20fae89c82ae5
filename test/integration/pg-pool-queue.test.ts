import { describe, expect, it } from "@effect/vitest"
import { Duration, Either } from "effect"
import pg from "pg"
import { parseDsn } from "../../src/persistence/pgHosts.js"
import { makePool } from "../../src/persistence/pgPool.js"
import { databaseUrl, noDatabase } from "../support/database.js"

/** Statements on one connection at once, as the cluster's storage sends its lock statements on its reserved one. */
const QUEUED = 3
/** Each statement's own time: under the statement timeout, but together longer than it and its grace (6 s). */
const SLEEP_S = 2.5

describe.skipIf(noDatabase)("the pool's watch on one connection's queued statements", () => {
  it(
    "counts each statement from its dispatch, not from the call: three 2.5 s statements in a row all answer",
    async () => {
      const dropped: Array<number> = []
      const pool = makePool({
        dsn: Either.getOrThrow(parseDsn(databaseUrl!)),
        maxConnections: 1,
        applicationName: "pg-pool-queue-test",
        types: pg.types,
        link: {
          connectTimeout: Duration.seconds(10),
          statementTimeout: Duration.seconds(5),
          idleTimeout: Duration.seconds(10),
          keepAlive: Duration.seconds(10)
        },
        onDropped: (waited) => dropped.push(waited)
      })
      try {
        const client = await pool.connect()
        try {
          const pid = (await client.query("SELECT pg_backend_pid() AS pid")).rows[0].pid
          // called together: pg runs them one after the other on the connection. With the watch started at the call,
          // the third (dispatched at ~5 s) was taken for unanswered at 6 s and its connection destroyed
          const answers = await Promise.allSettled(
            Array.from({ length: QUEUED }, (_, i) => client.query(`SELECT pg_sleep(${SLEEP_S}), ${i} AS n`))
          )
          expect(answers.map((a) => a.status)).toEqual(Array(QUEUED).fill("fulfilled"))
          expect(dropped).toEqual([])
          // the same connection still answers
          expect((await client.query("SELECT pg_backend_pid() AS pid")).rows[0].pid).toBe(pid)
        } finally {
          client.release()
        }
      } finally {
        await pool.end()
      }
    },
    60_000
  )
})
