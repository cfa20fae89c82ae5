import { ShardId } from "@effect/cluster"
import { describe, expect, it } from "@effect/vitest"
import { Option } from "effect"
import { pooled, shardOfLock, unservedSessions } from "../../src/cluster/ShardLockAudit.js"

describe("shard-lock audit", () => {
  it("reads SqlRunnerStorage's lock numbers as shards, and nothing else", () => {
    const groups = ["default", "other"]
    expect(shardOfLock(1_000_001, groups, 300)).toEqual(Option.some(ShardId.make("default", 1)))
    expect(shardOfLock(2_000_300, groups, 300)).toEqual(Option.some(ShardId.make("other", 300)))
    expect(shardOfLock(1_000_301, groups, 300)).toEqual(Option.none()) // past the group's shards
    expect(shardOfLock(3_000_001, groups, 300)).toEqual(Option.none()) // no third group
    expect(shardOfLock(7_340_001, groups, 300)).toEqual(Option.none()) // the migration lock
    expect(shardOfLock(42, groups, 300)).toEqual(Option.none())
  })

  it("suspects only sessions whose every shard lock is of a shard not served here", () => {
    const s = (n: number) => ShardId.make("default", n)
    const served = (shard: ShardId.ShardId) => shard.id <= 10
    const found = unservedSessions([
      { pid: 1, shard: s(1) }, // the lock connection: serves 1 and 2, is releasing 20
      { pid: 1, shard: s(2) },
      { pid: 1, shard: s(20) },
      { pid: 2, shard: s(30) }, // a pooled session left holding 30 and 31
      { pid: 2, shard: s(31) }
    ], served)
    expect([...found.keys()]).toEqual([2])
    expect(found.get(2)!.map((x) => x.id)).toEqual([30, 31])
    expect(unservedSessions([], served).size).toBe(0)
  })

  it("frees a suspect only when the pool lends it: idle now, or back in the pool since it was suspected", () => {
    const suspect = { since: 0, releases: 4 }
    expect(pooled({ pid: 1, lent: false, releases: 4 }, suspect)).toBe(true)
    expect(pooled({ pid: 1, lent: true, releases: 5 }, suspect)).toBe(true)
    // the cluster's lock connection: lent since its reservation, never back
    expect(pooled({ pid: 1, lent: true, releases: 4 }, suspect)).toBe(false)
  })
})
