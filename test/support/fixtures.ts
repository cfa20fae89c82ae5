import { EventCursor } from "../../src/schema/cursor.js"
import type { AttemptId, ProjectId, ProviderName, TaskId, TenantId, UserId } from "../../src/schema/ids.js"
import type { NormalizedStatus } from "../../src/schema/observation.js"
import { AttemptSnapshot, TaskSnapshot } from "../../src/schema/task.js"
import { observation, type ObservationOptions } from "../../src/testing/builders.js"

export const ids = {
  task: "00000000-0000-4000-8000-000000000001" as TaskId,
  attempt: "00000000-0000-4000-8000-0000000000a1" as AttemptId,
  oldAttempt: "00000000-0000-4000-8000-0000000000a0" as AttemptId,
  tenant: "00000000-0000-4000-8000-00000000000e" as TenantId,
  project: "00000000-0000-4000-8000-00000000000b" as ProjectId,
  user: "00000000-0000-4000-8000-00000000000c" as UserId
}

export const t0 = new Date("2026-11-30T00:00:00.000Z")

export const makeTask = (overrides: Partial<ConstructorParameters<typeof TaskSnapshot>[0]> = {}) =>
  new TaskSnapshot({
    id: ids.task,
    tenantId: ids.tenant,
    projectId: ids.project,
    userId: ids.user,
    status: "submitting",
    stage: "submitting",
    progress: null,
    version: 2,
    currentAttemptId: ids.attempt,
    homeRegion: "local",
    writeEpoch: 1,
    assetId: null,
    errorCode: null,
    lastCursor: new EventCursor({ epoch: 1, seq: 2 }),
    createdAt: t0,
    updatedAt: t0,
    terminalAt: null,
    ...overrides
  })

export const makeAttempt = (overrides: Partial<ConstructorParameters<typeof AttemptSnapshot>[0]> = {}) =>
  new AttemptSnapshot({
    id: ids.attempt,
    taskId: ids.task,
    attemptNo: 1,
    provider: "simulator" as ProviderName,
    model: "sim-1",
    clientRequestId: "crid-1",
    providerTaskId: "job-1",
    submitState: "SUBMITTING",
    lastProviderSeq: null,
    lastProviderAt: null,
    unknownSince: null,
    submitStartedAt: null,
    outputDeadlineAt: null,
    outputRefs: [],
    ...overrides
  })

/**
 * The kit's `observation` for the fixtures' attempt, received at `t0`. Its event id is made of what it says unless
 * `eventId` names one, so the same observation built twice is one event, as a provider's redelivery is.
 */
export const observe = (
  status: NormalizedStatus,
  { attemptId = ids.attempt, ...options }: ObservationOptions & { readonly attemptId?: AttemptId } = {}
) =>
  observation(attemptId, status, {
    eventId: `${status}-${options.stage ?? "-"}-${options.progress ?? "-"}-${options.seq ?? "-"}`,
    receivedAt: t0,
    ...options
  })
