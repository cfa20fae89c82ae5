import { Effect } from "effect"
import { Projects } from "../persistence/Projects.js"
import { TaskAdmission } from "../persistence/TaskAdmission.js"
import { definitionOf } from "../providers/providers.js"
import type { AttemptId, ProjectId, ProviderName, TaskId, TenantId, UserId } from "../schema/ids.js"
import { type NormalizedStatus, ProviderObservation } from "../schema/observation.js"
import type { Stage } from "../schema/task.js"

export const uuid = () => crypto.randomUUID()

export interface TaskOptions {
  readonly tenantId?: string
  readonly projectId?: string
  readonly userId?: string
  /** The provider the task's first attempt goes to ("simulator" by default: no provider is called). */
  readonly provider?: string
  /** By default a model the provider accepts (its definition's example model). */
  readonly model?: string
  readonly request?: Record<string, unknown>
  readonly reserveAmount?: number
}

/**
 * Admits a task through the real admission transaction (task row, first attempt, credit reserve, created event,
 * outbox row), as the API does; returns its id, first attempt id and snapshot. Every id defaults to a fresh one.
 * The project is made for the tenant first if it does not exist (the API's clients create it, POST /v1/projects).
 */
export const admitTask = (options: TaskOptions = {}) =>
  Effect.gen(function*() {
    const admission = yield* TaskAdmission
    const tenantId = (options.tenantId ?? "00000000-0000-4000-8000-00000000000e") as TenantId
    const projectId = (options.projectId ?? uuid()) as ProjectId
    yield* (yield* Projects).ensure(tenantId, projectId)
    const { task } = yield* admission.admit({
      tenantId,
      projectId,
      userId: (options.userId ?? uuid()) as UserId,
      idempotencyKey: uuid(),
      requestHash: "h",
      request: options.request ?? { prompt: "a test video", duration_seconds: 5 },
      provider: (options.provider ?? "simulator") as ProviderName,
      model: options.model ?? definitionOf(options.provider ?? "simulator")?.exampleModel ?? "sim-1",
      reserveAmount: options.reserveAmount ?? 5,
      traceId: "trace"
    })
    return { taskId: task.id as TaskId, attemptId: task.currentAttemptId as AttemptId, task }
  }).pipe(Effect.orDie)

let counter = 0

export interface ObservationOptions {
  readonly stage?: Stage
  readonly progress?: number
  /** The provider's own sequence number, when it sends one (a lower one than already seen is ignored). */
  readonly seq?: number
  /** The provider's event id: the same id twice is one event (deduplicated); a fresh one by default. */
  readonly eventId?: string
  readonly provider?: string
  readonly receivedAt?: Date
}

/**
 * What a provider said about an attempt (a webhook or a poll), as the intake hands it to the task entity. A failed
 * one carries a provider error; a succeeded one an output URL.
 */
export const observation = (attemptId: AttemptId, status: NormalizedStatus, options: ObservationOptions = {}) => {
  const id = options.eventId ?? `evt-${++counter}-${uuid()}`
  return new ProviderObservation({
    provider: (options.provider ?? "simulator") as ProviderName,
    providerEventId: id,
    dedupKey: id,
    providerTaskId: `job-${attemptId}`,
    clientRequestId: null,
    attemptId,
    providerSequence: options.seq ?? null,
    providerOccurredAt: null,
    receivedAt: options.receivedAt ?? new Date(),
    status,
    stage: options.stage ?? null,
    progress: options.progress ?? null,
    errorClass: status === "failed" ? "provider_failed" : null,
    errorCode: status === "failed" ? "RAW_PROVIDER_ERROR" : null,
    outputRefs: status === "succeeded" ? ["https://provider.example/out.mp4?token=secret"] : [],
    source: "webhook",
    payloadHash: id,
    traceId: "trace"
  })
}
