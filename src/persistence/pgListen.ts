import { SqlError } from "@effect/sql/SqlError"
import { Effect, Stream } from "effect"
import pg from "pg"

/**
 * LISTEN in place of sql-pg's. sql-pg keeps one LISTEN client for every channel and ignores its errors: when its
 * server goes away (a restart, a failover) the stream neither ends nor fails, so the wake loops (WakeLoop.ts) never
 * learn that their LISTEN is gone (their gauge still says listening), and it stays gone. Here each stream has a client of
 * its own, built like the pool's (the pool's Client class: it goes to the first writable host, the last good one
 * first), and a lost connection fails the stream: the wake loop's retry LISTENs again, on the promoted server.
 * One connection per channel (up to three per runner: inbox, outbox relay, token revocations) instead of one shared.
 */
export const listenOnOwnClient = (pool: pg.Pool) => (channel: string): Stream.Stream<string, SqlError> =>
  Stream.asyncScoped<string, SqlError>((emit) =>
    Effect.gen(function*() {
      const Client = (pool as unknown as { Client: typeof pg.Client }).Client
      const client = yield* Effect.acquireRelease(
        Effect.tryPromise({
          try: async () => {
            const client = new Client(pool.options)
            client.on("error", () => {}) // before connect: a failure there rejects connect instead
            await client.connect()
            return client
          },
          catch: (cause) => new SqlError({ cause, message: "Failed to acquire connection for listen" })
        }),
        (client) =>
          Effect.promise(() => client.end().catch(() => undefined)).pipe(
            Effect.interruptible,
            Effect.timeoutOption("1 second")
          )
      )
      const lost = (cause: unknown) => void emit.fail(new SqlError({ cause, message: "LISTEN connection lost" }))
      client.on("error", lost)
      client.on("end", () => lost(new Error("connection ended")))
      client.on("notification", (msg) => {
        if (msg.channel === channel && msg.payload !== undefined) void emit.single(msg.payload)
      })
      yield* Effect.tryPromise({
        try: () => client.query(`LISTEN ${pg.escapeIdentifier(channel)}`),
        catch: (cause) => new SqlError({ cause, message: "Failed to listen" })
      })
    })
  )
