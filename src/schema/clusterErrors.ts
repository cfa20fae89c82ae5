import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import { Schema } from "effect"

/** The admin API named a runner the cluster does not know (not registered, or its heartbeat has lapsed). */
export class RunnerNotFound extends Schema.TaggedError<RunnerNotFound>()(
  "RunnerNotFound",
  { address: Schema.String },
  HttpApiSchema.annotations({ status: 404 })
) {
  override get message() {
    return `no live runner at ${this.address} (cluster status lists them)`
  }
}

/** A drain or weight 0 that would leave no runner to own the shards. */
export class LastRunner extends Schema.TaggedError<LastRunner>()(
  "LastRunner",
  { address: Schema.String },
  HttpApiSchema.annotations({ status: 409 })
) {
  override get message() {
    return `${this.address} is the last runner that can own shards: draining it (or weight 0) would stop every task`
  }
}
