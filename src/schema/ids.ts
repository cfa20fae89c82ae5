import { Schema } from "effect"

export const TaskId = Schema.UUID.pipe(Schema.brand("TaskId"))
export type TaskId = typeof TaskId.Type

export const AttemptId = Schema.UUID.pipe(Schema.brand("AttemptId"))
export type AttemptId = typeof AttemptId.Type

export const TenantId = Schema.UUID.pipe(Schema.brand("TenantId"))
export type TenantId = typeof TenantId.Type

export const ProjectId = Schema.UUID.pipe(Schema.brand("ProjectId"))
export type ProjectId = typeof ProjectId.Type

export const UserId = Schema.UUID.pipe(Schema.brand("UserId"))
export type UserId = typeof UserId.Type

/** A provider name as configured (openai, replicate, fal, runway, luma, veo, simulator ...). */
export const ProviderName = Schema.String.pipe(
  Schema.pattern(/^[a-z][a-z0-9_-]{0,31}$/),
  Schema.brand("ProviderName")
)
export type ProviderName = typeof ProviderName.Type
