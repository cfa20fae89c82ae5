/**
 * Text PostgreSQL cannot store: `text` refuses NUL, and UTF-8 (so `text` and `jsonb`) has no encoding for an
 * unpaired UTF-16 surrogate. Valid JSON can carry both (`"\u0000"`, `"\ud800"`), so any string that came from a
 * provider's JSON is checked before it becomes a column, or a write fails with a "database unavailable" that no
 * retry can cure.
 */
const UNSTORABLE = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/
const UNSTORABLE_ALL = new RegExp(UNSTORABLE.source, "g")

export const isStorableText = (text: string): boolean => !UNSTORABLE.test(text)

/** The same text with each unstorable character replaced by U+FFFD (the replacement character). */
export const storableText = (text: string): string => text.replace(UNSTORABLE_ALL, "\ufffd")
