import { Config, ConfigError, Either } from "effect"
import { isIP } from "node:net"
import * as S from "../config/Settings.js"

/**
 * One allowed output host: `cdn.example` (that host), `*.cdn.example` (its subdomains, not itself), either with
 * `:port` to allow only that port (`127.0.0.1:4010`); IPv6 literals in brackets (`[::1]:4010`).
 */
export interface HostPattern {
  /** Lowercase, as a URL spells it (IPv4 normalized, IPv6 in brackets). */
  readonly host: string
  readonly subdomains: boolean
  /** null: any port. */
  readonly port: number | null
}

const SHAPE = /^(\*\.)?(\[[0-9a-fA-F:.]+\]|[^:/@?#[\]\s*]+)(?::(\d{1,5}))?$/

/** Reads one entry; Left(reason) for anything that is not a host, a `*.` suffix or either with a port. */
export const parseHostPattern = (
  entry: string,
  options: { readonly subdomains: boolean } = { subdomains: true }
): Either.Either<HostPattern, string> => {
  const m = SHAPE.exec(entry.trim())
  if (m === null) return Either.left(`"${entry}" is not a host, *.suffix or host:port`)
  const [, star, rawHost, rawPort] = m
  let host: string
  try {
    host = new URL(`http://${rawHost}`).hostname
  } catch {
    return Either.left(`"${entry}" is not a host name`)
  }
  const subdomains = star !== undefined
  if (subdomains && !options.subdomains) return Either.left(`"${entry}": wildcards are not allowed here`)
  if (subdomains && isIP(host.replace(/^\[|\]$/g, "")) !== 0) {
    return Either.left(`"${entry}": a wildcard needs a domain, not an address`)
  }
  const port = rawPort === undefined ? null : Number(rawPort)
  if (port !== null && (port < 1 || port > 65535)) return Either.left(`"${entry}": port out of range`)
  return Either.right({ host, subdomains, port })
}

/** The port a URL connects to (its default when it names none). */
const portOf = (url: URL) => url.port !== "" ? Number(url.port) : url.protocol === "https:" ? 443 : 80

/** Whether `url`'s host (and port) is one of `patterns`. */
export const hostAllowed = (patterns: ReadonlyArray<HostPattern>, url: URL): boolean =>
  patterns.some((p) =>
    (p.subdomains ? url.hostname.endsWith(`.${p.host}`) : url.hostname === p.host) &&
    (p.port === null || p.port === portOf(url))
  )

/** A comma-separated list of host patterns as a setting; a bad entry fails the settings check, naming it. */
export const hostPatternList = (
  name: string,
  description: string,
  fallback: ReadonlyArray<string>,
  options: { readonly subdomains: boolean } = { subdomains: true }
): S.Setting<ReadonlyArray<HostPattern>> => {
  const list = S.list(name, description, fallback)
  return {
    config: Config.mapOrFail(list.config, (raw) => {
      const parsed = raw.map((e) => e.trim()).filter((e) => e.length > 0).map((e) => parseHostPattern(e, options))
      const problems = parsed.flatMap((p) => (Either.isLeft(p) ? [p.left] : []))
      return problems.length === 0
        ? Either.right(parsed.flatMap((p) => (Either.isRight(p) ? [p.right] : [])))
        : Either.left(ConfigError.InvalidData([], `${name}: ${problems.join("; ")}`))
    }),
    docs: list.docs
  }
}
