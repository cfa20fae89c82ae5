import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Either } from "effect"
import * as S from "../../src/config/Settings.js"
import { DatabaseSettings } from "../../src/persistence/Database.js"
import { HostChoice } from "../../src/persistence/pgHostChoice.js"
import { isMultiHost, parseDsn } from "../../src/persistence/pgHosts.js"

const dsn = (url: string) => Either.getOrThrow(parseDsn(url))

/** What the runner's start check says of DATABASE_URL: nothing, or its one line. */
const check = (url: string) =>
  S.validateAll([DatabaseSettings]).pipe(
    Effect.either,
    Effect.withConfigProvider(ConfigProvider.fromMap(new Map([["DATABASE_URL", url]])))
  )

describe("DATABASE_URL: one host or several (libpq's form)", () => {
  it("a single host is kept as given, without host choice", () => {
    const url = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
    const d = dsn(url)
    expect(d.hosts).toEqual([{ host: "127.0.0.1", port: 5432 }])
    expect(d.targetSessionAttrs).toBe("any")
    expect(isMultiHost(d)).toBe(false)
    expect(d.urlFor(d.hosts[0]!)).toBe(url)
  })

  it("several hosts in order, default ports, target_session_attrs, one URL per host for pg", () => {
    const d = dsn("postgresql://u:p%40ss@db1:6001,db2,[::1]:6003/app?target_session_attrs=read-write&sslmode=disable")
    expect(d.hosts).toEqual([{ host: "db1", port: 6001 }, { host: "db2", port: 5432 }, { host: "::1", port: 6003 }])
    expect(d.targetSessionAttrs).toBe("read-write")
    expect(isMultiHost(d)).toBe(true)
    expect(d.urlFor(d.hosts[1]!)).toBe("postgresql://u:p%40ss@db2:5432/app?sslmode=disable")
    expect(d.urlFor(d.hosts[2]!)).toBe("postgresql://u:p%40ss@[::1]:6003/app?sslmode=disable")
    expect(dsn("postgres://h1:1,h2:2/db").targetSessionAttrs).toBe("any")
    expect(dsn("postgres://h1:1,h2:2/db?target_session_attrs=any").hosts.length).toBe(2)
    // one host that must be writable still checks its session
    expect(isMultiHost(dsn("postgres://h1:1/db?target_session_attrs=read-write"))).toBe(true)
  })

  it("refuses an empty host, a bad port, an unknown target_session_attrs, another scheme", () => {
    expect(parseDsn("postgres://u@h1:1,,h2:2/db")).toEqual(Either.left("empty host in the host list"))
    expect(parseDsn("postgres://u@h1:1,/db")).toEqual(Either.left("empty host in the host list"))
    expect(parseDsn("postgres://u@h1:70000/db")).toEqual(Either.left("bad port in \"h1:70000\""))
    expect(parseDsn("postgres://u@h1,h2/db?target_session_attrs=primary")).toEqual(
      Either.left("target_session_attrs=primary is not supported (any or read-write)")
    )
    expect(Either.isLeft(parseDsn("mysql://h1/db"))).toBe(true)
  })

  it.effect("a bad DATABASE_URL is one start line naming it; a good one passes", () =>
    Effect.gen(function*() {
      expect(yield* check("postgres://u@h1:1,,h2:2/db")).toEqual(
        Either.left("DATABASE_URL: empty host in the host list")
      )
      expect(yield* check("postgres://u@h1,h2/db?target_session_attrs=standby")).toEqual(
        Either.left("DATABASE_URL: target_session_attrs=standby is not supported (any or read-write)")
      )
      expect(Either.isRight(yield* check("postgres://u@h1:1,h2:2/db?target_session_attrs=read-write"))).toBe(true)
    }))

  it("the host choice tries the last good host first and reports each switch", () => {
    const d = dsn("postgres://h1:1,h2:2,h3:3/db")
    const seen: Array<string> = []
    const choice = new HostChoice(d, (h, prev) => seen.push(`${prev?.host ?? "-"}>${h.host}`))
    expect(choice.order().map((h) => h.host)).toEqual(["h1", "h2", "h3"])
    choice.chosen(d.hosts[1]!)
    choice.chosen(d.hosts[1]!)
    expect(choice.order().map((h) => h.host)).toEqual(["h2", "h1", "h3"])
    expect(choice.current.host).toBe("h2")
    choice.chosen(d.hosts[2]!)
    expect(seen).toEqual(["->h2", "h2>h3"])
  })
})
