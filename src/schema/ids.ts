import { Schema } from "effect"

/**
 * A UUID in its canonical lower-case form, whatever case it arrived in (PostgreSQL answers lower-case). A value that
 * is not one is not quoted back (a 400 would echo a path segment or header of up to 16 KiB).
 */
const CanonicalUUID = Schema.Lowercase.pipe(
  Schema.compose(Schema.UUID.annotations({ message: () => "must be a UUID" }))
)

export const TaskId = CanonicalUUID.pipe(Schema.brand("TaskId"))
export type TaskId = typeof TaskId.Type

export const AttemptId = CanonicalUUID.pipe(Schema.brand("AttemptId"))
export type AttemptId = typeof AttemptId.Type

export const TenantId = CanonicalUUID.pipe(Schema.brand("TenantId"))
export type TenantId = typeof TenantId.Type

export const ProjectId = CanonicalUUID.pipe(Schema.brand("ProjectId"))
export type ProjectId = typeof ProjectId.Type

export const UserId = CanonicalUUID.pipe(Schema.brand("UserId"))
export type UserId = typeof UserId.Type

/** A provider name as configured (openai, replicate, fal, runway, luma, veo, simulator ...). */
export const ProviderName = Schema.String.pipe(
  Schema.pattern(/^[a-z][a-z0-9_-]{0,31}$/),
  Schema.brand("ProviderName")
)
export type ProviderName = typeof ProviderName.Type
