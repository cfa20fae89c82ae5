import {
  Config,
  ConfigError,
  Duration,
  Effect,
  Either,
  type LogLevel,
  Option,
  ParseResult,
  type Redacted,
  Schema
} from "effect"

/**
 * Settings as data. Every setting is declared once, in its area's record, with its environment name, kind, default
 * and description; the record gives both the `Config` a service reads (each field `Config.withDescription`) and the
 * rows of the README's settings table (`npm run docs:config`), so the documentation cannot drift from the code.
 */
export interface SettingDoc {
  readonly name: string
  readonly kind: string
  /** As written in the environment; undefined when the setting has no default (optional or required). */
  readonly default: string | undefined
  readonly required: boolean
  readonly description: string
}

export interface Setting<A> {
  readonly config: Config.Config<A>
  readonly docs: ReadonlyArray<SettingDoc>
}

const setting = <A>(
  name: string,
  kind: string,
  description: string,
  config: Config.Config<A>,
  /** `shown` undefined: the default is "no value" (an empty list), shown as unset */
  fallback: { readonly value: A; readonly shown: string | undefined } | "optional" | "required"
): Setting<A> => ({
  config: (typeof fallback === "object" ? config.pipe(Config.withDefault(fallback.value)) : config).pipe(
    Config.withDescription(description)
  ),
  docs: [{
    name,
    kind,
    default: typeof fallback === "object" ? fallback.shown : undefined,
    required: fallback === "required",
    description
  }]
})

export const string = (name: string, description: string, fallback: string): Setting<string> =>
  setting(name, "string", description, Config.string(name), { value: fallback, shown: fallback })

export const requiredString = (name: string, description: string): Setting<string> =>
  setting(name, "string", description, Config.string(name), "required")

export const optionalString = (name: string, description: string): Setting<Option.Option<string>> =>
  setting(name, "string", description, Config.option(Config.string(name)), "optional")

export const integer = (
  name: string,
  description: string,
  fallback: number,
  range: { readonly min?: number; readonly max?: number } = {}
): Setting<number> => {
  const min = range.min ?? Number.MIN_SAFE_INTEGER
  const max = range.max ?? Number.MAX_SAFE_INTEGER
  const bounds = range.min !== undefined && range.max !== undefined
    ? `${range.min}–${range.max}`
    : range.min !== undefined
    ? `≥ ${range.min}`
    : range.max !== undefined
    ? `≤ ${range.max}`
    : ""
  return setting(
    name,
    bounds === "" ? "integer" : `integer (${bounds})`,
    description,
    Config.integer(name).pipe(
      Config.validate({ message: `must be an integer ${bounds}`.trimEnd(), validation: (n) => n >= min && n <= max })
    ),
    { value: fallback, shown: String(fallback) }
  )
}

export const number = (name: string, description: string, fallback: number): Setting<number> =>
  setting(
    name,
    "number",
    description,
    Config.number(name).pipe(
      Config.validate({ message: "must be a finite number", validation: (n: number) => Number.isFinite(n) })
    ),
    { value: fallback, shown: String(fallback) }
  )

/** A number > 0 (a rate, a share, a count that may be fractional). */
export const positiveNumber = (name: string, description: string, fallback: number): Setting<number> =>
  setting(
    name,
    "number (> 0)",
    description,
    Config.number(name).pipe(
      Config.validate({ message: "must be a number > 0", validation: (n: number) => Number.isFinite(n) && n > 0 })
    ),
    { value: fallback, shown: String(fallback) }
  )

export const optionalInteger = (name: string, description: string): Setting<Option.Option<number>> =>
  setting(name, "integer", description, Config.option(Config.integer(name)), "optional")

export const boolean = (name: string, description: string, fallback: boolean): Setting<boolean> =>
  setting(name, "boolean", description, Config.boolean(name), { value: fallback, shown: String(fallback) })

export const optionalBoolean = (name: string, description: string): Setting<Option.Option<boolean>> =>
  setting(name, "boolean", description, Config.option(Config.boolean(name)), "optional")

export const port = (name: string, description: string, fallback: number): Setting<number> =>
  setting(name, "port", description, Config.port(name), { value: fallback, shown: String(fallback) })

export const duration = (
  name: string,
  description: string,
  fallback: Duration.DurationInput
): Setting<Duration.Duration> =>
  setting(name, "duration", description, Config.duration(name), {
    value: Duration.decode(fallback),
    // shown as written ("7 days"), which the environment accepts; Duration.format's "7d" it does not
    shown: typeof fallback === "string" ? fallback : Duration.format(Duration.decode(fallback))
  })

export const optionalDuration = (name: string, description: string): Setting<Option.Option<Duration.Duration>> =>
  setting(name, "duration", description, Config.option(Config.duration(name)), "optional")

export const logLevel = (name: string, description: string, fallback: LogLevel.LogLevel): Setting<LogLevel.LogLevel> =>
  setting(name, "log level", description, Config.logLevel(name), { value: fallback, shown: fallback.label })

export const literal = <const L extends ReadonlyArray<string>>(
  name: string,
  description: string,
  values: L,
  fallback: L[number]
): Setting<L[number]> =>
  setting(name, values.join(" \\| "), description, Config.literal(...values)(name), {
    value: fallback,
    shown: fallback
  })

export const list = (
  name: string,
  description: string,
  fallback: ReadonlyArray<string>
): Setting<ReadonlyArray<string>> =>
  setting(name, "comma-separated list", description, Config.array(Config.string(), name), {
    value: fallback,
    shown: fallback.join(",")
  })

/** A Schema's decoding failure as one line: each issue with the list entry it is about (`entry 2: expected …`). */
const oneLine = (error: ParseResult.ParseError) =>
  ParseResult.ArrayFormatter.formatErrorSync(error).map((issue) =>
    (typeof issue.path[0] === "number" ? `entry ${issue.path[0] + 1}: ` : "") + issue.message
  ).join("; ")

/**
 * A setting whose text is decoded by a Schema (a value with structure: a list of addresses); a bad value is one line
 * naming the variable and what is wrong with it.
 */
export const decoded = <A>(
  name: string,
  kind: string,
  description: string,
  schema: Schema.Schema<A, string>,
  fallback: { readonly value: A; readonly shown: string | undefined }
): Setting<A> =>
  setting(
    name,
    kind,
    description,
    Config.string(name).pipe(Config.mapOrFail((text) =>
      Either.mapLeft(
        Schema.decodeEither(schema)(text),
        (error) => ConfigError.InvalidData([], oneLine(error))
      )
    )),
    fallback
  )

/** `host:port` (an IPv6 host in brackets: `[::1]:26379`). */
export const HostPort = Schema.transformOrFail(
  Schema.String,
  Schema.Struct({ host: Schema.NonEmptyString, port: Schema.Int.pipe(Schema.between(1, 65535)) }),
  {
    strict: true,
    decode: (text, _, ast) => {
      const m = /^(?:\[([0-9A-Fa-f:.]+)\]|([^\s:[\]]+)):(\d{1,5})$/.exec(text)
      return m === null
        ? ParseResult.fail(new ParseResult.Type(ast, text, `expected host:port, got ${JSON.stringify(text)}`))
        : ParseResult.succeed({ host: m[1] ?? m[2]!, port: Number(m[3]) })
    },
    encode: ({ host, port }) => ParseResult.succeed(`${host.includes(":") ? `[${host}]` : host}:${port}`)
  }
)
export type HostPort = typeof HostPort.Type

/** A comma-separated list of `host:port` (blanks around the commas ignored). */
export const HostPortList = Schema.transform(Schema.String, Schema.Array(Schema.String), {
  strict: true,
  decode: (text) => text.split(",").map((s) => s.trim()).filter((s) => s.length > 0),
  encode: (items) => items.join(",")
}).pipe(Schema.compose(Schema.Array(HostPort)))

/** A list of `host:port`; unset or empty: none. */
export const hostPorts = (name: string, description: string): Setting<ReadonlyArray<HostPort>> =>
  decoded(name, "comma-separated host:port list", description, HostPortList, { value: [], shown: undefined })

/** A secret: redacted in logs and errors; optional unless `required`. */
export const secret = (name: string, description: string): Setting<Option.Option<Redacted.Redacted>> =>
  setting(name, "secret", description, Config.option(Config.redacted(name)), "optional")

export const requiredSecret = (name: string, description: string): Setting<Redacted.Redacted> =>
  setting(name, "secret", description, Config.redacted(name), "required")

/** A setting whose value is checked further (a minimum length, a URL); the check's message names the variable. */
export const refine = <A>(s: Setting<A>, message: string, validation: (a: A) => boolean): Setting<A> => ({
  // a check on a finished value has lost its path: the message names the variable itself
  config: s.config.pipe(
    Config.validate({ message: `${s.docs.map((d) => d.name).join(", ")}: ${message}`, validation })
  ),
  docs: s.docs
})

/** A setting read into another shape (the docs are the source setting's). */
export const map = <A, B>(s: Setting<A>, f: (a: A) => B): Setting<B> => ({
  config: Config.map(s.config, f),
  docs: s.docs
})

/** Several settings read as one value (a provider's base URL, key and flags; a secret and its predecessor). */
export const all = <F extends Record<string, Setting<any>>>(
  fields: F
): Setting<{ readonly [K in keyof F]: SettingOf<F[K]> }> => ({
  config: Config.all(Object.fromEntries(Object.entries(fields).map(([k, f]) => [k, f.config]))) as any,
  docs: Object.values(fields).flatMap((f) => f.docs)
})

type SettingOf<S> = S extends Setting<infer A> ? A : never

/** One area's settings: one record, read when its service is built, validated at start with all the others. */
export interface Area<A> extends Setting<A> {
  readonly area: string
  readonly summary: string
}

export type AreaOf<T> = T extends Area<infer A> ? A : never

export const area = <F extends Record<string, Setting<any>>>(
  name: string,
  summary: string,
  fields: F
): Area<{ readonly [K in keyof F]: SettingOf<F[K]> }> => ({ ...all(fields), area: name, summary })

/**
 * Reads every area once, before anything else starts: the first invalid value is one line naming its variable
 * (e.g. `AUTH_SECRET: must be at least 32 characters`).
 */
export const validateAll = (areas: ReadonlyArray<Area<unknown>>): Effect.Effect<void, string> =>
  Effect.forEach(areas, (a) => Effect.either(a.config)).pipe(
    Effect.flatMap((results) => {
      const failed = results.flatMap((r) => Either.isLeft(r) ? failures(r.left) : [])
      return failed.length === 0 ? Effect.void : Effect.fail(failed.join("; "))
    })
  )

/** Each failure of a config error as `NAME: what is wrong`, one per failing variable. */
export const describe = (error: ConfigError.ConfigError): string => failures(error).join("; ")

const failures = (error: ConfigError.ConfigError): ReadonlyArray<string> => {
  switch (error._op) {
    case "And":
    case "Or":
      return [...new Set([...failures(error.left), ...failures(error.right)])]
    case "MissingData":
      return [`${error.path.join(".")}: required, not set`]
    case "InvalidData":
    case "Unsupported":
    case "SourceUnavailable":
      return [error.path.length === 0 ? error.message : `${error.path.join(".")}: ${error.message}`]
  }
}
