import type { SqlError } from "@effect/sql/SqlError"
import { Effect } from "effect"
import { StorageUnavailable } from "../schema/errors.js"

/**
 * A database failure as its callers see it: logged with the store's name, then a typed, retryable
 * StorageUnavailable (never a defect, which an entity would replay).
 */
export const storageUnavailable = (store: string) => (error: SqlError) =>
  Effect.logError(`${store}: database failure`, error).pipe(
    Effect.zipRight(Effect.fail(new StorageUnavailable({ message: "the database is unavailable: retry later" })))
  )
