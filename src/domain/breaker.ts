/**
 * The provider breaker's state machine (seed 19.6: an error-rate breaker per provider and model), pure: every
 * function takes the time and returns the next state. Its Redis twin (src/quota/breakerScript.ts) runs the same
 * steps atomically for all runners; test/integration/breaker.test.ts checks that both agree step by step.
 *
 * closed → open: within the sliding window (BUCKETS buckets of window / BUCKETS), at least minCalls calls and a
 * share of faults (5xx, timeouts, connection errors) at or above errorRate.
 * open → half_open: once the cool-down is over (openFor, doubled on each re-open without a close, up to openMax).
 * half_open: at most `probes` calls go through per round; `probes` successes close it, one fault re-opens it. A
 * round whose probes never report (a runner killed mid-call) lapses after probeTimeout and lets new probes through.
 */

export type BreakerStateName = "closed" | "open" | "half_open"

export interface BreakerConfig {
  readonly errorRate: number
  readonly minCalls: number
  readonly windowMs: number
  readonly openForMs: number
  readonly openMaxMs: number
  readonly probes: number
  readonly probeTimeoutMs: number
}

/** The stored state: short keys, since it is also the JSON value of the Redis key (p, m: provider and model). */
export interface BreakerState {
  readonly p: string
  readonly m: string
  readonly s: BreakerStateName
  /** open: when it may half-open; half_open: when the current probe round lapses */
  readonly until: number
  /** opens since the last close (the cool-down doubles with each) */
  readonly trips: number
  /** probes let through in this half-open round, and probe successes since it half-opened */
  readonly probes: number
  readonly ok: number
  /** when this state began */
  readonly since: number
  /** the window: bucket number → [calls, faults] */
  readonly b: Readonly<Record<string, readonly [number, number]>>
}

export const BUCKETS = 10

export const closedState = (provider: string, model: string, now: number): BreakerState => ({
  p: provider,
  m: model,
  s: "closed",
  until: 0,
  trips: 0,
  probes: 0,
  ok: 0,
  since: now,
  b: {}
})

export type Admission =
  | { readonly _tag: "Admitted"; readonly probe: boolean }
  | { readonly _tag: "Refused"; readonly waitMs: number }

export interface Step<A> {
  readonly state: BreakerState
  readonly result: A
  /** the state left, when this step changed it */
  readonly from: BreakerStateName | null
}

const coolDown = (trips: number, c: BreakerConfig) => Math.min(c.openMaxMs, c.openForMs * 2 ** (trips - 1))

const open = (st: BreakerState, now: number, c: BreakerConfig): BreakerState => {
  const trips = st.trips + 1
  return { ...st, s: "open", trips, until: now + coolDown(trips, c), probes: 0, ok: 0, since: now, b: {} }
}

/**
 * May a call go now? `claim` false only looks (no probe is taken): a poll looks before it takes a quota slot,
 * then claims after. A refusal says how long to wait: until the cool-down ends, or (half-open, probes taken) a
 * quarter of the cool-down at most, so waiting calls notice a close soon without asking in a tight loop.
 */
export const admit = (st: BreakerState, now: number, c: BreakerConfig, claim: boolean): Step<Admission> => {
  let from: BreakerStateName | null = null
  let s = st
  if (s.s === "open") {
    if (now < s.until) return { state: s, from, result: { _tag: "Refused", waitMs: s.until - now } }
    from = "open"
    s = { ...s, s: "half_open", probes: 0, ok: 0, until: now + c.probeTimeoutMs, since: now }
  }
  if (s.s === "half_open") {
    if (now >= s.until) s = { ...s, probes: 0, until: now + c.probeTimeoutMs }
    if (s.probes >= c.probes) {
      const waitMs = Math.min(s.until - now, Math.max(1, c.openForMs / 4))
      return { state: s, from, result: { _tag: "Refused", waitMs } }
    }
    if (claim) s = { ...s, probes: s.probes + 1 }
    return { state: s, from, result: { _tag: "Admitted", probe: true } }
  }
  return { state: s, from, result: { _tag: "Admitted", probe: false } }
}

/** A call's outcome: `fault` for a 5xx, a timeout or no answer; anything else the provider answered counts as ok. */
export const record = (
  st: BreakerState,
  now: number,
  c: BreakerConfig,
  fault: boolean,
  probe: boolean
): Step<void> => {
  if (st.s === "half_open") {
    // a call let through before the breaker opened says nothing about the provider now
    if (!probe) return { state: st, from: null, result: undefined }
    if (fault) return { state: open(st, now, c), from: "half_open", result: undefined }
    const ok = st.ok + 1
    if (ok < c.probes) return { state: { ...st, ok }, from: null, result: undefined }
    return { state: { ...closedState(st.p, st.m, now) }, from: "half_open", result: undefined }
  }
  if (st.s === "open") return { state: st, from: null, result: undefined }
  const size = c.windowMs / BUCKETS
  const current = Math.floor(now / size)
  const b: Record<string, readonly [number, number]> = {}
  let calls = 0
  let faults = 0
  for (const [key, [n, f]] of Object.entries(st.b)) {
    if (Number(key) > current - BUCKETS) {
      b[key] = [n, f]
      calls += n
      faults += f
    }
  }
  const [n0, f0] = b[String(current)] ?? [0, 0]
  b[String(current)] = [n0 + 1, f0 + (fault ? 1 : 0)]
  calls += 1
  faults += fault ? 1 : 0
  const next = { ...st, b }
  if (calls >= c.minCalls && faults >= c.errorRate * calls) {
    return { state: open(next, now, c), from: "closed", result: undefined }
  }
  return { state: next, from: null, result: undefined }
}

/** The state as an operator reads it at `now`: an open breaker whose cool-down is over shows as half-open. */
export const observed = (st: BreakerState, now: number): BreakerStateName =>
  st.s === "open" && now >= st.until ? "half_open" : st.s

/** How long the stored state must outlive `now` (a lapsed key reads as closed, so never before `until`). */
export const retentionMs = (st: BreakerState, now: number, c: BreakerConfig) =>
  Math.ceil(Math.max(0, st.until - now) + c.windowMs + c.openMaxMs)
