import { Duration, Effect, Schedule } from "effect"
import { inSlices } from "./inSlices.js"

/** How often a ring beats one of its spokes, at most (an interval shorter than two ticks has one spoke). */
const TICK_MS = 100
const MAX_SPOKES = 600

/**
 * A transport's open connections, each given its heartbeat (an SSE comment, a WebSocket ping) once per interval,
 * spread over the interval instead of all at once. A connection joins one of `interval / 100 ms` spokes, in turn;
 * every 100 ms the next spoke's connections beat. One timer for all of them, and no per-connection timer.
 *
 * Why: a heartbeat is a socket write, and a write costs its syscall whatever its size (~46 µs on loopback here). All
 * 5,000 streams at once held the event loop for 230 ms every 15 s (a CPU profile of bench:sse's one-gateway runner,
 * in slices of 500 with turns between them, 23 ms each), 19,500 for about a second: every event delivered meanwhile
 * waited. Spread, a tick writes 1/150 of them.
 *
 * Otherwise a Set: membership, size and iteration (in the order of joining) for shutdown and pauses.
 */
export class HeartbeatRing<A> implements Iterable<A> {
  private readonly spokeOf = new Map<A, Set<A>>()
  private readonly spokes: ReadonlyArray<Set<A>>
  private readonly tick: Duration.Duration
  private joined = 0

  constructor(interval: Duration.Duration) {
    const ms = Duration.toMillis(interval)
    const n = Math.min(MAX_SPOKES, Math.max(1, Math.floor(ms / TICK_MS)))
    this.spokes = Array.from({ length: n }, () => new Set<A>())
    this.tick = Duration.millis(ms / n)
  }

  add(a: A): void {
    if (this.spokeOf.has(a)) return
    const spoke = this.spokes[this.joined++ % this.spokes.length]!
    spoke.add(a)
    this.spokeOf.set(a, spoke)
  }

  delete(a: A): boolean {
    const spoke = this.spokeOf.get(a)
    if (spoke === undefined) return false
    spoke.delete(a)
    return this.spokeOf.delete(a)
  }

  has(a: A): boolean {
    return this.spokeOf.has(a)
  }

  get size(): number {
    return this.spokeOf.size
  }

  [Symbol.iterator](): Iterator<A> {
    return this.spokeOf.keys()
  }

  /**
   * Runs forever: every tick (on a fixed grid, so a busy tick does not stretch the interval), `beat` is called on
   * the next spoke's connections that are still here. A connection beats once per interval, its first time within
   * an interval of joining.
   */
  beat(beat: (a: A) => void): Effect.Effect<never> {
    let turn = 0
    const next = Effect.suspend(() => {
      const spoke = this.spokes[turn]!
      turn = (turn + 1) % this.spokes.length
      // a spoke of a very large ring still gives the event loop turns (inSlices); one gone meanwhile is skipped
      return inSlices(spoke, (a) => {
        if (this.spokeOf.has(a)) beat(a)
      })
    })
    return next.pipe(Effect.repeat(Schedule.fixed(this.tick)), Effect.zipRight(Effect.never))
  }
}
