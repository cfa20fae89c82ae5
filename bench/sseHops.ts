/**
 * bench:sse's accounting of the last hop, Redis → client: which deliveries came by the bus, and how long the gateway
 * itself took with them, apart from a wait for cursor order that the upstream's order caused.
 */

/** An event of the run: project index * 2^24 + cursor sequence. */
export const key = (p: number, seq: number) => p * 16_777_216 + seq
export const projectOfKey = (k: number) => Math.floor(k / 16_777_216)

/**
 * For `committedAt`'s events (when each was committed), what the clients' `arrivals` (project index, sequence and
 * arrival time, three numbers each) say of the last hop, given `busAt` (when this process's Redis subscriber got
 * each event):
 * - `busToClient`: Redis → client of each delivery that came by the bus; `fromTail` counts the others, which came from
 *   the feeds' tail of PostgreSQL before (or without) the bus bringing the event;
 * - a feed hands events on in cursor order, so an event that reached Redis before an earlier event of its project
 *   waits for it (`outOfOrder` counts those deliveries); `inOrderToClient` counts each delivery's hop from when every
 *   event of its project up to it had reached Redis (the phase's own: the earlier ones came long before), so that the
 *   gateway's own hop is told from that wait.
 */
export const busHops = (
  arrivals: ReadonlyArray<number>,
  committedAt: ReadonlyMap<number, number>,
  busAt: ReadonlyMap<number, number>
) => {
  const byProject = new Map<number, Array<number>>()
  for (const k of committedAt.keys()) {
    const p = projectOfKey(k)
    const ks = byProject.get(p)
    if (ks === undefined) byProject.set(p, [k])
    else ks.push(k)
  }
  const inOrderAt = new Map<number, number>()
  for (const ks of byProject.values()) {
    let latest = -Infinity
    for (const k of ks.sort((a, b) => a - b)) {
      latest = Math.max(latest, busAt.get(k) ?? -Infinity)
      inOrderAt.set(k, latest)
    }
  }
  const busToClient: Array<number> = []
  const inOrderToClient: Array<number> = []
  let fromTail = 0
  let outOfOrder = 0
  for (let i = 0; i < arrivals.length; i += 3) {
    const k = key(arrivals[i]!, arrivals[i + 1]!)
    if (!committedAt.has(k)) continue
    const b = busAt.get(k)
    const arrived = arrivals[i + 2]!
    if (b === undefined || arrived < b) {
      fromTail++
      continue
    }
    busToClient.push(arrived - b)
    const ready = inOrderAt.get(k)!
    inOrderToClient.push(arrived - ready)
    if (ready > b) outOfOrder++
  }
  return { busToClient, inOrderToClient, fromTail, outOfOrder }
}
