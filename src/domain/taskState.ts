import type { AttemptSnapshot, TaskSnapshot } from "../schema/task.js"

/** A task as its entity holds it: the committed row and its current attempt (none before the first). */
export interface TaskState {
  readonly task: TaskSnapshot
  readonly attempt: AttemptSnapshot | null
}
