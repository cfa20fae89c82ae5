import { Cause, Duration, Effect, Schedule } from "effect"
import { backoffSchedule } from "../domain/backoff.js"
import { retryAfterFailure } from "../runtime/retry.js"
import { awaitWithin } from "../runtime/timers.js"
import { TaskUnavailable } from "../schema/errors.js"
import type { TaskId } from "../schema/ids.js"
import { GenerationTask } from "./GenerationTask.js"

/**
 * Sends to task entities with a bounded retry. Rpcs are volatile, so a message in flight while a shard moves
 * or a runner stops can fail as a transport error or even a defect (seen: SocketError during SIGTERM);
 * every Rpc is idempotent by task state, so re-sending is safe. Domain errors pass through untouched.
 */
export class TaskClient extends Effect.Service<TaskClient>()("TaskClient", {
  effect: Effect.gen(function*() {
    const makeClient = yield* GenerationTask.client
    const retrySchedule = backoffSchedule({ base: Duration.millis(50), cap: Duration.seconds(1) }).pipe(
      Schedule.upTo(Duration.seconds(10))
    )

    const send = <A, E>(taskId: TaskId, f: (client: ReturnType<typeof makeClient>) => Effect.Effect<A, E>) => {
      const attempt = Effect.suspend(() => f(makeClient(taskId))).pipe(
        Effect.catchAllDefect((defect) =>
          Effect.fail(new TaskUnavailable({ message: `delivery failed: ${Cause.pretty(Cause.die(defect))}` }))
        ),
        Effect.catchIf(isTransport, (e) => Effect.fail(new TaskUnavailable({ message: String(e) })))
      ) as Effect.Effect<A, Exclude<E, { readonly _tag: TransportTag }> | TaskUnavailable>
      return retryAfterFailure(attempt, { while: isUnavailable, schedule: retrySchedule })
    }

    /**
     * `send`, waited for at most `within` (then TimeoutException); the message itself runs on to its end, a minute at
     * most, in a fiber of its own. @effect/cluster builds an entity in the fiber of its first message's sender: a
     * sender interrupted mid-build (a timeout on a loaded runner, while the entity's first read or, then, its persisted
     * keep-alive waited for a pooled connection) left a half-built entity whose scope is never closed, and a task neither parked nor driven.
     */
    const sendWithin = <A, E>(
      taskId: TaskId,
      f: (client: ReturnType<typeof makeClient>) => Effect.Effect<A, E>,
      within: Duration.DurationInput
    ) =>
      Effect.flatMap(
        Effect.forkDaemon(
          send(taskId, f).pipe(
            Effect.timeoutFail({
              duration: Duration.minutes(1),
              onTimeout: () => new TaskUnavailable({ message: "no answer within a minute" })
            })
          )
        ),
        // on the live clock a timer, not a race of two more fibers (src/runtime/timers.ts)
        (delivery) => awaitWithin(delivery, Duration.decode(within))
      )

    return { send, sendWithin } as const
  })
}) {}

type TransportTag = "MailboxFull" | "AlreadyProcessingMessage" | "PersistenceError"
const transportTags: ReadonlySet<string> = new Set<TransportTag>([
  "MailboxFull",
  "AlreadyProcessingMessage",
  "PersistenceError"
])
const isUnavailable = (e: unknown): e is TaskUnavailable => e instanceof TaskUnavailable
const isTransport = (e: unknown): boolean =>
  typeof e === "object" && e !== null && "_tag" in e && transportTags.has(String(e._tag))
