/**
 * How operators' decisions (drain, weight) reach @effect/cluster's shard assignment. Pure: RunnerControls.ts calls
 * it on every `getRunners` of the runner's Sharding loop (Sharding.ts "RunnerStorage sync", every
 * REFRESH_ASSIGNMENTS_INTERVAL), the one place every runner computes the whole shard map from (address, weight,
 * healthy) rows. Each runner reads the same controls, so each computes the same map.
 *
 * Four facts of @effect/cluster 0.60.2 shape this (Sharding.ts ~l.1000-1060, effect/HashRing.ts):
 * - A runner listed unhealthy is left out of the hash ring: it owns no shards, yet it keeps its registration,
 *   its heartbeat and its HTTP listener. That is the drain. The health check singleton keeps writing `healthy = true`
 *   into cluster_runners for it, and the runner re-registers itself as healthy; neither reaches the ring, because
 *   the drain is applied here, after the stored health is read.
 * - The ring does not take weight 0 (HashRing raises it to 0.1, a tenth of a share): weight 0 is a drain too.
 * - A runner is keyed by (address, weight). When its weight changes, the loop adds the new key to the ring, then
 *   removes the old key's address from it, which removes the new key as well, and never adds it again while it stays
 *   healthy. So the new weight is listed unhealthy for one round first (the ring drops the address), and healthy
 *   from the next (the ring adds it with its new weight). A re-weighted runner therefore hands its shards over and
 *   takes its new share back within two refreshes (measured: README "Runners and shards").
 * - A runner re-registers itself whenever the list lacks its own key (address, RUNNER_WEIGHT), with no pause in
 *   between: a runner whose weight an operator changed also finds its configured key in the list (unhealthy, so it
 *   changes nothing), else it would re-register in a tight loop.
 */

export interface Listed {
  readonly address: string
  /** The weight the runner registered with (its RUNNER_WEIGHT). */
  readonly registeredWeight: number
  /** cluster_runners.healthy: the health check's verdict. */
  readonly healthy: boolean
}

export interface RunnerControl {
  readonly draining: boolean
  /** Set by an operator; null: the runner's own RUNNER_WEIGHT. */
  readonly weight: number | null
}

export interface Overlaid {
  readonly address: string
  readonly weight: number
  readonly healthy: boolean
}

export interface OverlayResult {
  readonly runners: ReadonlyArray<Overlaid>
  /** The weight listed per address this round: the next round's `previous`. */
  readonly listed: ReadonlyMap<string, number>
  /** True when every healthy runner is drained (or weight 0): the controls are ignored until one is undrained. */
  readonly suspended: boolean
}

/** Weight the ring uses for the runner: the operator's, or its own; a 0 keeps the registered key (it is out anyway). */
export const effectiveWeight = (registered: number, control: RunnerControl | undefined): number =>
  control?.weight === null || control?.weight === undefined || control.weight === 0 ? registered : control.weight

/** Whether the controls take the runner out of the ring. */
export const heldBack = (control: RunnerControl | undefined): boolean =>
  control !== undefined && (control.draining || control.weight === 0)

export const overlay = (
  listed: ReadonlyArray<Listed>,
  controls: ReadonlyMap<string, RunnerControl>,
  self: { readonly address: string; readonly weight: number } | undefined,
  previous: ReadonlyMap<string, number>
): OverlayResult => {
  // never leave the cluster without an owner: a drain of the last healthy runner, or a runner drained while the
  // others died, would stop every task; the drain waits until another runner can take the shards
  const suspended = listed.some((r) => r.healthy) &&
    listed.every((r) => !r.healthy || heldBack(controls.get(r.address)))
  const runners: Array<Overlaid> = []
  const next = new Map<string, number>()
  for (const r of listed) {
    const control = controls.get(r.address)
    const weight = effectiveWeight(r.registeredWeight, control)
    const before = previous.get(r.address)
    const reweighted = before !== undefined && before !== weight
    runners.push({
      address: r.address,
      weight,
      healthy: r.healthy && !reweighted && (suspended || !heldBack(control))
    })
    next.set(r.address, weight)
    if (self !== undefined && r.address === self.address && weight !== self.weight) {
      runners.push({ address: r.address, weight: self.weight, healthy: false })
    }
  }
  return { runners, listed: next, suspended }
}
