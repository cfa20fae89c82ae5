import { describe, expect, it } from "@effect/vitest"
import { overlay, type RunnerControl } from "../../src/cluster/runnerOverlay.js"

const a = { address: "a:1", registeredWeight: 1, healthy: true }
const b = { address: "b:1", registeredWeight: 1, healthy: true }
const controls = (entries: Record<string, RunnerControl>) => new Map(Object.entries(entries))
const health = (r: ReturnType<typeof overlay>) => r.runners.map((x) => `${x.address}/${x.weight}:${x.healthy}`)

describe("operators' controls over the runner list the shard assignment reads", () => {
  it("a drained runner is listed unhealthy (out of the ring) and keeps its key", () => {
    const r = overlay([a, b], controls({ "b:1": { draining: true, weight: null } }), undefined, new Map())
    expect(health(r)).toEqual(["a:1/1:true", "b:1/1:false"])
    expect(r.suspended).toBe(false)
  })

  it("weight 0 is a drain: the ring cannot take 0", () => {
    const r = overlay([a, b], controls({ "b:1": { draining: false, weight: 0 } }), undefined, new Map())
    expect(health(r)).toEqual(["a:1/1:true", "b:1/1:false"])
  })

  it("a new weight is listed unhealthy for one round, then healthy with it", () => {
    const c = controls({ "b:1": { draining: false, weight: 3 } })
    const first = overlay([a, b], c, undefined, new Map([["a:1", 1], ["b:1", 1]]))
    expect(health(first)).toEqual(["a:1/1:true", "b:1/3:false"])
    const second = overlay([a, b], c, undefined, first.listed)
    expect(health(second)).toEqual(["a:1/1:true", "b:1/3:true"])
  })

  it("a runner whose weight an operator changed also finds its own configured key, unhealthy", () => {
    const c = controls({ "b:1": { draining: false, weight: 3 } })
    const r = overlay([a, b], c, { address: "b:1", weight: 1 }, new Map([["a:1", 1], ["b:1", 3]]))
    expect(health(r)).toEqual(["a:1/1:true", "b:1/3:true", "b:1/1:false"])
  })

  it("draining every healthy runner is suspended: the cluster keeps an owner", () => {
    const c = controls({ "a:1": { draining: true, weight: null }, "b:1": { draining: true, weight: null } })
    const r = overlay([a, b], c, undefined, new Map())
    expect(r.suspended).toBe(true)
    expect(health(r)).toEqual(["a:1/1:true", "b:1/1:true"])
    // the drained survivor of a dead peer keeps its shards too
    const alone = overlay(
      [a, { ...b, healthy: false }],
      controls({ "a:1": { draining: true, weight: null } }),
      undefined,
      new Map()
    )
    expect(alone.suspended).toBe(true)
    expect(health(alone)).toEqual(["a:1/1:true", "b:1/1:false"])
  })
})
