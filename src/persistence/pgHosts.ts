import { Either, Schema } from "effect"

/**
 * DATABASE_URL in libpq's multi-host form, `postgres://user@h1:p1,h2:p2/db?target_session_attrs=read-write`, which
 * node-postgres does not take (its parser fails on the comma list). Decoded at the edge into the hosts, in order, the
 * session wanted, and one single-host URL per host that pg understands. A single host decodes the same way and keeps
 * pg's own path: its URL is the one given.
 */
export interface PgHost {
  readonly host: string
  readonly port: number
}

/** libpq's `any` (its default: the first host that answers) and `read-write` (the first writable session). */
export const TargetSessionAttrs = Schema.Literal("any", "read-write")
export type TargetSessionAttrs = typeof TargetSessionAttrs.Type

export interface PgDsn {
  readonly hosts: ReadonlyArray<PgHost>
  readonly targetSessionAttrs: TargetSessionAttrs
  /** The URL pg is given for `host`: the DSN with that host alone and without target_session_attrs. */
  readonly urlFor: (host: PgHost) => string
}

const DEFAULT_PORT = 5432

const hostPort = (text: string): Either.Either<PgHost, string> => {
  const m = /^(?:\[([0-9A-Fa-f:.]+)\]|([^\s:[\]/]+))(?::(\d{1,5}))?$/.exec(text)
  if (m === null) return Either.left(text === "" ? "empty host in the host list" : `bad host ${JSON.stringify(text)}`)
  const port = m[3] === undefined ? DEFAULT_PORT : Number(m[3])
  if (port < 1 || port > 65535) return Either.left(`bad port in ${JSON.stringify(text)}`)
  return Either.right({ host: m[1] ?? m[2]!, port })
}

/** Parses the DSN; the error is one line saying what is wrong (never the password). */
export const parseDsn = (url: string): Either.Either<PgDsn, string> => {
  // scheme://[userinfo@]hostlist[/path][?query][#fragment]: the host list is what URL cannot parse
  const m = /^(postgres(?:ql)?:\/\/)(?:([^@/?#]*)@)?([^/?#]*)([/?#].*)?$/.exec(url)
  if (m === null) return Either.left("expected postgres://[user[:password]@]host[:port][,host[:port]...]/database")
  const [, scheme, userinfo, hostList, rest = ""] = m as unknown as [string, string, string | undefined, string, string]
  const hosts: Array<PgHost> = []
  for (const part of hostList.split(",")) {
    const parsed = hostPort(part)
    if (Either.isLeft(parsed)) return Either.left(parsed.left)
    hosts.push(parsed.right)
  }
  const queryAt = rest.indexOf("?")
  const query = new URLSearchParams(queryAt === -1 ? "" : rest.slice(queryAt + 1).split("#")[0])
  const attrs = query.get("target_session_attrs") ?? "any"
  if (!Schema.is(TargetSessionAttrs)(attrs)) {
    return Either.left(`target_session_attrs=${attrs} is not supported (any or read-write)`)
  }
  query.delete("target_session_attrs")
  const path = queryAt === -1 ? rest : rest.slice(0, queryAt)
  const tail = `${path}${query.size > 0 ? `?${query.toString()}` : ""}`
  const single = hosts.length === 1 && attrs === "any"
  const urlFor = (h: PgHost) =>
    single && hosts[0] === h
      ? url
      : `${scheme}${userinfo === undefined ? "" : `${userinfo}@`}${
        h.host.includes(":") ? `[${h.host}]` : h.host
      }:${h.port}${tail}`
  // the URL pg will parse must parse: a bad database path or query shows here, at start
  if (!URL.canParse(urlFor(hosts[0]!))) return Either.left("not a valid URL")
  return Either.right({ hosts, targetSessionAttrs: attrs, urlFor })
}

/** Whether the DSN needs the host-choosing client (several hosts, or a session kind to check). */
export const isMultiHost = (dsn: PgDsn) => dsn.hosts.length > 1 || dsn.targetSessionAttrs !== "any"

export const formatHost = (h: PgHost) => `${h.host.includes(":") ? `[${h.host}]` : h.host}:${h.port}`
