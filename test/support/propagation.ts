import type { SqlClient } from "@effect/sql"
import { type Context, Duration, Effect, Schedule, Schema, Stream } from "effect"
import type { NotificationBus } from "../../src/bus/NotificationBus.js"
import { TaskClient } from "../../src/entities/TaskClient.js"
import type { Projects } from "../../src/persistence/Projects.js"
import type { TaskAdmission } from "../../src/persistence/TaskAdmission.js"
import type { TaskStore } from "../../src/persistence/TaskStore.js"
import { LiveTaskEvent } from "../../src/schema/events.js"
import type { AttemptId, TaskId } from "../../src/schema/ids.js"
import { scaledDuration } from "./env.js"
import { admitTask, observation } from "./tasks.js"

export type RunnerServices = SqlClient.SqlClient | TaskClient | TaskAdmission | Projects | TaskStore

export const decodeLive = Schema.decodeUnknownSync(Schema.parseJson(LiveTaskEvent))

/** Collects a project's bus events in the background: messages decoded, gaps counted. */
export const listen = (bus: Context.Tag.Service<typeof NotificationBus>, projectId: string) =>
  Effect.gen(function*() {
    const stream = Stream.fromQueue(yield* bus.subscribe(projectId))
    const seen: Array<LiveTaskEvent> = []
    let gaps = 0
    yield* stream.pipe(
      Stream.runForEach((e) => Effect.sync(() => (e._tag === "Gap" ? gaps++ : seen.push(decodeLive(e.payload))))),
      Effect.forkScoped
    )
    return { seen, gaps: () => gaps }
  })

export const until = (what: string, check: () => boolean, within = Duration.seconds(30)) =>
  Effect.suspend(() => (check() ? Effect.void : Effect.fail(what))).pipe(
    Effect.retry(Schedule.spaced(Duration.millis(100)).pipe(Schedule.upTo(scaledDuration(within))))
  )

/** Admits a task and moves it through three more versions; returns its id. */
export const taskWithHistory = (projectId: string) =>
  Effect.gen(function*() {
    const { attemptId, taskId } = yield* admitTask({ projectId })
    const tasks = yield* TaskClient
    for (
      const o of [
        observation(attemptId as AttemptId, "queued"),
        observation(attemptId as AttemptId, "running", { progress: 10 }),
        observation(attemptId as AttemptId, "succeeded")
      ]
    ) yield* tasks.send(taskId as TaskId, (c) => c.Observe(o))
    return taskId
  })

export const versionsByTask = (events: ReadonlyArray<LiveTaskEvent>) => {
  const byTask = new Map<string, Array<number>>()
  for (const e of events) {
    byTask.set(e.payload.task_id, [...(byTask.get(e.payload.task_id) ?? []), e.payload.task_version])
  }
  return byTask
}
