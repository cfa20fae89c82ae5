import { Entity, ShardingConfig } from "@effect/cluster"
import { Effect, Layer } from "effect"
import { GenerationTask } from "../entities/GenerationTask.js"
import { GenerationTaskLive } from "../entities/GenerationTaskLive.js"
import { TaskClient } from "../entities/TaskClient.js"
import type { TaskId } from "../schema/ids.js"
import type { ProviderObservation } from "../schema/observation.js"
import { layerLifecycleDisabled } from "./TestRunner.js"

/**
 * Talks to a task's entity through the cluster (the test runner layer's TaskClient), as the webhook intake and the
 * API do: every message is routed to the runner that owns the task's shard and answered by its entity.
 */
export const taskTestClient = (taskId: TaskId) =>
  Effect.map(TaskClient, (tasks) => ({
    /** Applies what a provider said; answers whether it changed the task ("changed", "unchanged", "ignored" …). */
    observe: (o: ProviderObservation) => tasks.send(taskId, (c) => c.Observe(o)),
    /** The user's cancel: at once when nothing was sent to the provider yet, refused once the output exists. */
    cancel: (traceId = "test") => tasks.send(taskId, (c) => c.Cancel({ traceId })),
    /** Wakes the task's lifecycle (submission), as the API does after admission. */
    start: (traceId = "test") => tasks.send(taskId, (c) => c.Start({ traceId })),
    /** The task as its entity holds it (status, stage, progress, version, cursor). */
    snapshot: tasks.send(taskId, (c) => c.GetSnapshot())
  }))

/**
 * A client for one task against a fresh entity instance of its own, with no cluster (no shards, no runner): the
 * entity's behaviour alone, on the stores in context. `Entity.makeTestClient` underneath.
 */
export const isolatedEntityClient = (taskId: string) =>
  Entity.makeTestClient(GenerationTask, GenerationTaskLive.pipe(Layer.provide(layerLifecycleDisabled))).pipe(
    Effect.flatMap((makeClient) => makeClient(taskId)),
    Effect.provide(ShardingConfig.layer())
  )
