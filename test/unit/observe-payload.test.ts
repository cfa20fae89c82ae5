import { describe, expect, it } from "@effect/vitest"
import { Schema } from "effect"
import { GenerationTask } from "../../src/entities/GenerationTask.js"
import type { AttemptId } from "../../src/schema/ids.js"
import { ProviderObservation } from "../../src/schema/observation.js"
import { observation, uuid } from "../../src/testing/builders.js"

// Observe's payload schema has no `make` (the Rpc client would validate every observation again on send), yet a
// message to another runner is encoded and decoded exactly as by the class itself
describe("the Observe message's payload", () => {
  // the protocol's map is typed by the union of every message: this one carries observations
  const payload = GenerationTask.protocol.requests.get("Observe")!.payloadSchema as unknown as Schema.Schema<
    ProviderObservation,
    Schema.Schema.Encoded<typeof ProviderObservation>
  >

  it("is sent as built: the client calls no constructor", () => {
    expect((payload as { readonly make?: unknown }).make).toBeUndefined()
  })

  it("crosses runners as the class: encoded, decoded back to an equal ProviderObservation", () => {
    const sent = observation(uuid() as AttemptId, "running", { progress: 40 })
    const wire = Schema.encodeSync(payload)(sent)
    expect(wire).toEqual(Schema.encodeSync(ProviderObservation)(sent))
    const received = Schema.decodeUnknownSync(payload)(JSON.parse(JSON.stringify(wire)))
    expect(received).toBeInstanceOf(ProviderObservation)
    expect(received).toEqual(sent)
  })

  it("refuses on the wire what the class refuses", () => {
    const wire = Schema.encodeSync(payload)(observation(uuid() as AttemptId, "running", { progress: 40 }))
    expect(() => Schema.decodeUnknownSync(payload)({ ...wire, progress: 140 })).toThrow()
    expect(() => Schema.decodeUnknownSync(payload)({ ...wire, attemptId: "not-a-uuid" })).toThrow()
  })
})
