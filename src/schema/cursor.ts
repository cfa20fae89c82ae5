import { ParseResult, Schema } from "effect"

/**
 * A position in a project's event stream. `epoch` names the stream's incarnation (a restored or rebuilt
 * stream gets a new one, so an old cursor is detectably foreign); `seq` is gap-free and commit-ordered.
 * On the wire it is the string `<epoch>-<seq>` (SSE `id:`, `Last-Event-ID`, `?after=`).
 */
export class EventCursor extends Schema.Class<EventCursor>("EventCursor")({
  epoch: Schema.NonNegativeInt,
  seq: Schema.NonNegativeInt
}) {
  override toString(): string {
    return `${this.epoch}-${this.seq}`
  }
}

export const EventCursorFromString = Schema.transformOrFail(
  Schema.String.annotations({ description: "A stream cursor: <epoch>-<seq>" }),
  Schema.typeSchema(EventCursor),
  {
    strict: true,
    decode: (s, _, ast) => {
      const match = /^(\d{1,15})-(\d{1,15})$/.exec(s)
      return match === null
        ? ParseResult.fail(new ParseResult.Type(ast, s, "expected a cursor <epoch>-<seq>"))
        : ParseResult.succeed(new EventCursor({ epoch: Number(match[1]), seq: Number(match[2]) }))
    },
    encode: (c) => ParseResult.succeed(`${c.epoch}-${c.seq}`)
  }
)
