import { describe, expect, it } from "@effect/vitest"
import * as fc from "fast-check"
import { ConnectionBuffer } from "../../src/gateway/ConnectionBuffer.js"
import type { StreamEvent } from "../../src/persistence/EventLog.js"
import type { TaskEventType } from "../../src/schema/events.js"
import type { TaskId } from "../../src/schema/ids.js"
import type { Stage, TaskStatus } from "../../src/schema/task.js"

const EPOCH = 1_700_000_000_000
const taskIds = [
  "00000000-0000-4000-8000-000000000001",
  "00000000-0000-4000-8000-000000000002",
  "00000000-0000-4000-8000-000000000003"
] as ReadonlyArray<string> as ReadonlyArray<TaskId>

/** (status, stage) pairs a task really goes through (TaskStatus × Stage), a small set so that repeats are common. */
const pairs: ReadonlyArray<readonly [TaskStatus, Stage]> = [
  ["queued", "queued"],
  ["submitted", "provider_queued"],
  ["running", "starting"],
  ["running", "generating"],
  ["provider_status_unknown", "generating"],
  ["provider_succeeded", "generated"],
  ["ready", "done"]
]

/** What the next event of a task changes: only its progress (the common case), its status/stage, or its type. */
type Change =
  | { readonly _tag: "progress"; readonly progress: number | null }
  | { readonly _tag: "status"; readonly pair: number; readonly progress: number | null }
  | { readonly _tag: "type"; readonly type: TaskEventType }

type Op =
  | { readonly _tag: "offer"; readonly task: number; readonly change: Change }
  | { readonly _tag: "take" }

const progressArb = fc.option(fc.integer({ min: 0, max: 100 }), { freq: 5 })
const changeArb: fc.Arbitrary<Change> = fc.oneof(
  { arbitrary: progressArb.map((progress) => ({ _tag: "progress" as const, progress })), weight: 6 },
  {
    arbitrary: fc.record({ pair: fc.nat(pairs.length - 1), progress: progressArb }).map((r) => ({
      _tag: "status" as const,
      ...r
    })),
    weight: 3
  },
  {
    arbitrary: fc.constantFrom<TaskEventType>("task.created", "task.status.changed").map((type) => ({
      _tag: "type" as const,
      type
    })),
    weight: 1
  }
)
const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    arbitrary: fc.record({ task: fc.nat(taskIds.length - 1), change: changeArb }).map((r) => ({
      _tag: "offer" as const,
      ...r
    })),
    weight: 12
  },
  { arbitrary: fc.constant({ _tag: "take" as const }), weight: 1 }
)

interface Offered {
  readonly event: StreamEvent
  readonly accepted: boolean
  readonly sizeBefore: number
  readonly sizeAfter: number
  /** what the buffer held when it was offered, and after */
  readonly before: ReadonlyArray<StreamEvent>
  readonly after: ReadonlyArray<StreamEvent>
}

/** Turns the ops into events (per task increasing versions, globally increasing seq), runs them, records all. */
const simulate = (capacity: number, ops: ReadonlyArray<Op>) => {
  const buffer = new ConnectionBuffer(capacity)
  const state = taskIds.map(() => ({
    version: 0,
    type: "task.created" as TaskEventType,
    pair: 0,
    progress: null as number | null
  }))
  let seq = 100
  const offers: Array<Offered> = []
  const takes: Array<{ readonly out: Array<StreamEvent>; readonly acceptedSince: Array<StreamEvent> }> = []
  let acceptedSince: Array<StreamEvent> = []
  const take = () => {
    const out = buffer.takeAll()
    expect(buffer.size).toBe(0)
    takes.push({ out, acceptedSince })
    acceptedSince = []
  }
  for (const op of ops) {
    if (op._tag === "take") {
      take()
      continue
    }
    const s = state[op.task]!
    const { change } = op
    if (change._tag === "progress") s.progress = change.progress
    else if (change._tag === "status") {
      s.pair = change.pair
      s.progress = change.progress
    } else s.type = change.type
    s.version += 1
    seq += 1
    const [status, stage] = pairs[s.pair]!
    const event: StreamEvent = {
      seq,
      cursor: `${EPOCH}-${seq}`,
      type: s.type,
      payload: {
        task_id: taskIds[op.task]!,
        task_version: s.version,
        status,
        stage,
        progress: s.progress,
        asset_id: status === "ready" ? "asset-1" : null,
        error_code: null
      }
    }
    const before = buffer.toArray()
    const accepted = buffer.offer(event)
    offers.push({ event, accepted, sizeBefore: before.length, sizeAfter: buffer.size, before, after: buffer.toArray() })
    if (accepted) acceptedSince.push(event)
  }
  take()
  return { offers, takes }
}

const kindOf = (e: StreamEvent) => `${e.type}/${e.payload.status}/${e.payload.stage}`

const collapse = (kinds: ReadonlyArray<string>) => kinds.filter((k, i) => i === 0 || kinds[i - 1] !== k)
const ofTask = (events: ReadonlyArray<StreamEvent>, task: TaskId) => events.filter((e) => e.payload.task_id === task)

const capacityArb = fc.integer({ min: 1, max: 6 })
const opsArb = fc.array(opArb, { minLength: 1, maxLength: 80 })

describe("ConnectionBuffer: examples", () => {
  const ev = (seq: number, task: number, version: number, status: TaskStatus, stage: Stage, progress: number) =>
    ({
      seq,
      cursor: `${EPOCH}-${seq}`,
      type: "task.status.changed",
      payload: {
        task_id: taskIds[task]!,
        task_version: version,
        status,
        stage,
        progress,
        asset_id: null,
        error_code: null
      }
    }) satisfies StreamEvent

  it("latest progress wins and moves to the end; a status change is refused when full, not merged", () => {
    const buffer = new ConnectionBuffer(2)
    expect(buffer.offer(ev(1, 0, 1, "running", "generating", 10))).toBe(true)
    expect(buffer.offer(ev(2, 1, 1, "running", "generating", 10))).toBe(true)
    expect(buffer.offer(ev(3, 0, 2, "running", "generating", 20))).toBe(true)
    expect(buffer.size).toBe(2)
    expect(buffer.offer(ev(4, 0, 3, "provider_succeeded", "generated", 100))).toBe(false)
    expect(buffer.size).toBe(2)
    expect(buffer.takeAll().map((e) => e.seq)).toEqual([2, 3])
    expect(buffer.size).toBe(0)
    expect(buffer.takeAll()).toEqual([])
  })
})

describe("ConnectionBuffer: properties", () => {
  it.prop("(a) never holds more than its capacity", [capacityArb, opsArb], ([capacity, ops]) => {
    const { offers, takes } = simulate(capacity, ops)
    for (const o of offers) expect(o.sizeAfter).toBeLessThanOrEqual(capacity)
    for (const t of takes) expect(t.out.length).toBeLessThanOrEqual(capacity)
  })

  it.prop(
    "(b) every event is kept while there is room; refused only when full and nothing can be coalesced",
    [capacityArb, opsArb],
    ([capacity, ops]) => {
      const { offers } = simulate(capacity, ops)
      for (const o of offers) {
        if (o.sizeBefore < capacity) {
          expect(o.accepted).toBe(true)
          expect(o.sizeAfter).toBe(o.sizeBefore + 1)
          continue
        }
        // full: something was coalesced to make room, or no task had two consecutive updates of one kind
        const withNew = [...o.before, o.event]
        const droppable = taskIds.some((task) => {
          const kinds = ofTask(withNew, task).map(kindOf)
          return kinds.length !== collapse(kinds).length
        })
        expect(o.accepted).toBe(droppable)
        if (!o.accepted) expect(o.after).toEqual(o.before)
      }
    }
  )

  it.prop(
    "(c) takeAll gives strictly increasing seq (cursor order on the wire), coalescing included",
    [capacityArb, opsArb],
    ([capacity, ops]) => {
      const { takes } = simulate(capacity, ops)
      const all = takes.flatMap((t) => t.out)
      for (let i = 1; i < all.length; i++) expect(all[i]!.seq).toBeGreaterThan(all[i - 1]!.seq)
      // and every event taken was accepted, not invented
      for (const t of takes) for (const e of t.out) expect(t.acceptedSince).toContain(e)
    }
  )

  it.prop(
    "(d) a change of status, stage or type is never coalesced away",
    [capacityArb, opsArb],
    ([capacity, ops]) => {
      const { offers, takes } = simulate(capacity, ops)
      const accepted = offers.filter((o) => o.accepted).map((o) => o.event)
      const out = takes.flatMap((t) => t.out)
      for (const task of taskIds) {
        expect(collapse(ofTask(out, task).map(kindOf))).toEqual(collapse(ofTask(accepted, task).map(kindOf)))
      }
    }
  )

  it.prop(
    "(e) the last accepted event of every task is present and is its greatest version in the buffer",
    [capacityArb, opsArb],
    ([capacity, ops]) => {
      const { takes } = simulate(capacity, ops)
      for (const { acceptedSince, out } of takes) {
        for (const task of taskIds) {
          const last = ofTask(acceptedSince, task).at(-1)
          if (last === undefined) {
            expect(ofTask(out, task)).toEqual([])
            continue
          }
          expect(out).toContain(last)
          const versions = ofTask(out, task).map((e) => e.payload.task_version)
          expect(Math.max(...versions)).toBe(last.payload.task_version)
          expect(ofTask(out, task).at(-1)).toBe(last)
        }
      }
    }
  )

  it.prop(
    "(f) nothing is coalesced away unless the buffer filled up; when it did, a task keeps no superseded update",
    [capacityArb, opsArb],
    ([capacity, ops]) => {
      const { offers, takes } = simulate(capacity, ops)
      for (const { acceptedSince, out } of takes) {
        if (acceptedSince.length <= capacity) expect(out).toEqual(acceptedSince)
      }
      // an offer that found the buffer full compacted it: no task keeps an update a later one supersedes
      for (const o of offers.filter((o) => o.sizeBefore === capacity && o.accepted)) {
        for (const task of taskIds) {
          const kinds = ofTask(o.after, task).map(kindOf)
          expect(kinds).toEqual(collapse(kinds))
        }
      }
    }
  )
})
