/**
 * Shards this runner let go while a task's lifecycle ran on it (GenerationTaskLive notes them as its lifecycle is
 * interrupted), for ResumeOnAcquire's next look: a shard held again by then (a lock lost and taken back between two
 * looks, which comparing the shards held would not see) has its tasks resumed as on any shard acquired.
 */
export const makeShardsLeft = () => {
  const left = new Set<string>()
  return {
    note: (shard: string) => void left.add(shard),
    /** The shards noted since the last take. */
    take: (): ReadonlyArray<string> => {
      const shards = Array.from(left)
      left.clear()
      return shards
    }
  } as const
}

export type ShardsLeft = ReturnType<typeof makeShardsLeft>
