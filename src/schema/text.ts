import { Schema } from "effect"

/** A UTF-16 code unit of a surrogate pair with no partner: it has no UTF-8 form, so PostgreSQL cannot store it. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/

/**
 * Why PostgreSQL could not store `text`, or undefined when it can: `text` and `jsonb` refuse U+0000, and a lone
 * surrogate (valid in a JSON string escape, `"\ud800"`) has no UTF-8 encoding. Refused at the edge, such text was
 * a 503 "storage unavailable" from the INSERT, retried by clients forever.
 */
export const unstorable = (text: string): string | undefined =>
  text.includes("\u0000")
    ? "must not contain NUL (U+0000) characters"
    : LONE_SURROGATE.test(text)
    ? "must be well-formed Unicode (it holds a lone surrogate)"
    : undefined

/** A string PostgreSQL can store: every text field of a request that reaches the database is one. */
export const StorableString = Schema.String.pipe(
  Schema.filter((text) => unstorable(text) ?? true, {
    identifier: "StorableString",
    description: "text without NUL characters or lone surrogates"
  })
)
