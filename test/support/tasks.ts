import { Effect } from "effect"
import { TaskAdmission } from "../../src/persistence/TaskAdmission.js"
import type { AttemptId, ProjectId, ProviderName, TaskId, TenantId, UserId } from "../../src/schema/ids.js"
import { type NormalizedStatus, ProviderObservation } from "../../src/schema/observation.js"
import type { Stage } from "../../src/schema/task.js"

export const uuid = () => crypto.randomUUID()

/** Admits a task through the real admission transaction; returns its id and first attempt id. */
export const admitTask = (
  options: { readonly projectId?: string; readonly tenantId?: string; readonly provider?: string } = {}
) =>
  Effect.gen(function*() {
    const admission = yield* TaskAdmission
    const { task } = yield* admission.admit({
      tenantId: (options.tenantId ?? "00000000-0000-4000-8000-00000000000e") as TenantId,
      projectId: (options.projectId ?? uuid()) as ProjectId,
      userId: uuid() as UserId,
      idempotencyKey: uuid(),
      requestHash: "h",
      request: {},
      provider: (options.provider ?? "simulator") as ProviderName,
      model: "sim-1",
      reserveAmount: 5,
      traceId: "trace"
    })
    return { taskId: task.id as TaskId, attemptId: task.currentAttemptId as AttemptId, task }
  }).pipe(Effect.orDie)

let counter = 0

export const observation = (
  attemptId: AttemptId,
  status: NormalizedStatus,
  options: { readonly stage?: Stage; readonly progress?: number; readonly seq?: number; readonly eventId?: string } = {}
) => {
  const id = options.eventId ?? `evt-${++counter}-${uuid()}`
  return new ProviderObservation({
    provider: "simulator" as ProviderName,
    providerEventId: id,
    dedupKey: id,
    providerTaskId: `job-${attemptId}`,
    clientRequestId: null,
    attemptId,
    providerSequence: options.seq ?? null,
    providerOccurredAt: null,
    receivedAt: new Date(),
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
