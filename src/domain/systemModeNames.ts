/**
 * The system modes of seed 19.5.5, from the least to the most degraded (seed 19.10.2's order of retreat). A plain
 * list without Effect, so the operator page's browser bundle shares it with the Schema in systemModes.ts.
 */
export const SYSTEM_MODES = [
  "NORMAL",
  "DEGRADED_NOTIFY",
  "DEGRADED_PROVIDER",
  "QUEUE_ONLY",
  "RECONCILE_ONLY",
  "READ_ONLY",
  "MAINTENANCE"
] as const
