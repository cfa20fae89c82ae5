import { Duration } from "effect"

/**
 * The one factor by which every timeout that guards a test scales (TEST_TIME_FACTOR, default 1; a slow or shared
 * machine sets more). A guard is how long we are willing to wait for an event, never what a test asserts about speed.
 */
export const TIME_FACTOR = Math.max(1, Number(process.env.TEST_TIME_FACTOR ?? "1") || 1)

export const scaled = (ms: number): number => ms * TIME_FACTOR

export const scaledDuration = (d: Duration.DurationInput): Duration.Duration =>
  Duration.times(Duration.decode(d), TIME_FACTOR)
